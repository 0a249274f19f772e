"""Document masking: a packed row's per-token losses equal its documents' losses run alone (MPT and HF models).

The packed rows' `sequence_id` comes from the real collator (EOS rule), so data and model are tested together.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from foundry.data.collate import TextCollator
from foundry.data.documents import DocumentRule
from foundry.models import HFCausalLMConfig, build_model
from foundry.models.documents import document_causal_mask, document_positions
from foundry.models.mpt import MPTConfig, MPTForCausalLM

V, EOS, PAD = 96, 0, 1
MPT_VARIANTS = {
    "alibi": {"alibi": True},
    "rope_dail": {"rope": True},
    "rope_hf_gqa": {"rope": True, "rope_impl": "hf", "attn_type": "grouped_query_attention", "kv_n_heads": 2},
    "learned_pos": {},
}


def _docs(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 1, 9, 4]  # each ends with EOS; a one-token document is just its EOS
    return [torch.randint(2, V, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]


def _token_losses(model: torch.nn.Module, ids: torch.Tensor, **kw: torch.Tensor) -> torch.Tensor:
    """(B, S-1) next-token losses of every position but the last."""
    logits = model(ids, **kw).logits.float()
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")


def _check_packed_equals_alone(model: torch.nn.Module) -> None:
    docs = _docs(0)
    row = [t for d in docs for t in d]
    short = docs[0] + docs[1]  # a second, padded row
    collate = TextCollator(max_seq_len=len(row), pad_token_id=PAD, documents=DocumentRule(eos_id=EOS))
    batch = collate([{"tokens": np.array(row)}, {"tokens": np.array(short)}])
    assert batch["sequence_id"][0].tolist() == [i for i, d in enumerate(docs) for _ in d]
    model.eval()
    with torch.no_grad():
        packed = _token_losses(model, batch["input_ids"], attention_mask=batch["attention_mask"],
                               sequence_id=batch["sequence_id"])  # fmt: skip
        start = 0
        for doc in docs:
            if len(doc) > 1:  # targets inside the document (the last token's target is the next document)
                alone = _token_losses(model, torch.tensor([doc]))[0]
                torch.testing.assert_close(
                    packed[0, start : start + len(doc) - 1], alone, atol=2e-5, rtol=1e-4
                )
                if start + len(doc) <= len(short):
                    torch.testing.assert_close(
                        packed[1, start : start + len(doc) - 1], alone, atol=2e-5, rtol=1e-4
                    )
            start += len(doc)
        # no attention across documents: changing document 2 leaves every other document's logits unchanged
        other = torch.tensor([[t for d in (docs[:2] + _docs(1)[2:3] + docs[3:]) for t in d]])
        base = model(batch["input_ids"][:1], sequence_id=batch["sequence_id"][:1]).logits
        pert = model(other, sequence_id=batch["sequence_id"][:1]).logits
        a, b = len(docs[0]) + len(docs[1]), len(row) - len(docs[3])
        torch.testing.assert_close(pert[:, :a], base[:, :a], atol=1e-6, rtol=0)
        torch.testing.assert_close(pert[:, b:], base[:, b:], atol=1e-6, rtol=0)
        assert not torch.allclose(pert[:, a:b], base[:, a:b])


@pytest.mark.parametrize("variant", sorted(MPT_VARIANTS))
def test_mpt_packed_row_losses_equal_documents_alone(variant):
    torch.manual_seed(0)
    attn = {"attn_uses_sequence_id": True, **MPT_VARIANTS[variant]}
    cfg = MPTConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=V, max_seq_len=32, attn_config=attn)
    _check_packed_equals_alone(MPTForCausalLM(cfg))


def _hf_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> str:
    path = tmp_path_factory.mktemp(name)
    if name == "llama":
        LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=V, max_position_embeddings=64).save_pretrained(path)  # fmt: skip
    else:
        GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=V, n_positions=64).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {name: _hf_dir(tmp_path_factory, name) for name in ("llama", "gpt2")}


def _hf(path: str, impl: str | None, *, on: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = HFCausalLMConfig(pretrained_model_name_or_path=path, pretrained=False, attn_implementation=impl,
                           attn_uses_sequence_id=on)  # fmt: skip
    return build_model(cfg)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_hf_causal_lm_packed_row_losses_equal_documents_alone(hf_dirs, arch, impl):
    model = _hf(hf_dirs[arch], impl)
    assert isinstance(model, LlamaForCausalLM | GPT2LMHeadModel)  # still the transformers class
    _check_packed_equals_alone(model)


def test_hf_causal_lm_without_the_option_ignores_sequence_id_and_needs_it_when_on(hf_dirs):
    ids = torch.randint(2, V, (1, 8))
    off = _hf(hf_dirs["gpt2"], "sdpa", on=False).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            off(ids, sequence_id=torch.tensor([[0] * 4 + [1] * 4])).logits, off(ids).logits
        )
    on = _hf(hf_dirs["gpt2"], "sdpa").train()
    with pytest.raises(ValueError, match="sequence_id"):
        on(ids, labels=ids)
    loss = on(ids, labels=ids, sequence_id=torch.zeros_like(ids)).loss
    loss.backward()
    assert loss.isfinite()


def test_hf_causal_lm_backends_without_4d_masks_are_refused(hf_dirs):
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2'.*eager"):
        HFCausalLMConfig(pretrained_model_name_or_path=hf_dirs["gpt2"], attn_implementation="flash_attention_2",
                         attn_uses_sequence_id=True)  # fmt: skip


def test_document_positions_and_mask():
    sid = torch.tensor([[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 7, 7]])
    assert document_positions(sid).tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 1]]
    mask = document_causal_mask(sid)[0, 0].int().tolist()
    assert mask == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0],
                    [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1]]  # fmt: skip


def test_model_configs_say_whether_they_use_sequence_ids(hf_dirs):
    from foundry.models.mpt.schema import AttnConfig, MPTModelConfig

    mpt = MPTModelConfig(d_model=8, n_heads=2, n_layers=1)
    assert not mpt.uses_sequence_id()
    mpt = MPTModelConfig(d_model=8, n_heads=2, n_layers=1, attn_config=AttnConfig(attn_uses_sequence_id=True))
    assert mpt.uses_sequence_id()
    hf = HFCausalLMConfig(pretrained_model_name_or_path=hf_dirs["gpt2"], attn_uses_sequence_id=True)
    assert hf.uses_sequence_id()
