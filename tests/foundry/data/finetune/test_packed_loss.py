"""Packed finetuning rows give every example the same loss as its padded row (tiny MPT with sequence ids, and
`hf-causal-lm` GPT-2 / Llama from local configs with per-example positions and a block-diagonal mask)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, LlamaConfig, PretrainedConfig

from foundry.data.finetune import FinetuneDataConfig, build_finetune_dataloader
from foundry.models.hf_causal_lm import HFCausalLMConfig, build_hf_causal_lm
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from streaming.reader.world import World


def _example_losses(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> list[float]:
    """Summed next-token loss per example (per sequence id when packed, per row otherwise), in row order."""
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()
    token = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch["labels"][:, 1:], reduction="none")
    seq = batch.get("sequence_id", batch["attention_mask"] - 1)[:, 1:]
    out = []
    for r in range(token.shape[0]):
        for k in range(int(seq[r].max()) + 1):
            out.append(float(token[r][seq[r] == k].sum()))
    return out


def _write_rows(folder) -> None:
    rows = [{"prompt": f"Question {i}: " + "why? " * (i % 5), "response": f" because {i}"} for i in range(12)]
    rows.append({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _assert_packed_equal_padded(model: torch.nn.Module, folder, tok) -> None:
    def losses(packing: float | None, batch_size: int) -> list[float]:
        cfg = FinetuneDataConfig(hf_name=str(folder), packing_ratio=packing, shuffle=False)
        loader = build_finetune_dataloader(
            cfg,
            tokenizer=tok,
            device_batch_size=batch_size,
            world=World(),
            split="train",
            max_seq_len=64,
            seed=0,
        )
        return sorted(x for b in loader for x in _example_losses(model, b))

    padded, packed = losses(None, 1), losses(3.25, 4)  # 13 examples into 4 rows (the rest stays leftover)
    assert len(padded) == 13 and 8 <= len(packed) <= 13
    for loss in packed:  # each packed example's loss is one of the padded ones (they are all distinct)
        match = min(range(len(padded)), key=lambda i: abs(padded[i] - loss))
        torch.testing.assert_close(loss, padded.pop(match), atol=1e-4, rtol=1e-5)


@pytest.mark.slow
def test_packed_losses_equal_padded(tmp_path, neox):
    _write_rows(tmp_path)
    attn = {"attn_impl": "torch", "attn_uses_sequence_id": True}
    model = MPTForCausalLM(
        MPTConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=len(neox), max_seq_len=64, attn_config=attn)
    ).eval()
    _assert_packed_equal_padded(model, tmp_path, neox)


def _hf_config(arch: str, vocab: int) -> PretrainedConfig:
    if arch == "gpt2":  # learned absolute positions: they must restart per example
        return GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=vocab, n_positions=64)
    return LlamaConfig(  # rotary positions
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=64,
    )


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hf_causal_lm_packed_losses_equal_padded(tmp_path, neox, arch, impl):
    _write_rows(tmp_path)
    _hf_config(arch, len(neox)).save_pretrained(tmp_path / "model")
    torch.manual_seed(0)
    cfg = HFCausalLMConfig(
        pretrained_model_name_or_path=str(tmp_path / "model"),
        pretrained=False,
        attn_implementation=impl,
        attn_uses_sequence_id=True,
    )
    model = build_hf_causal_lm(cfg).eval()
    _assert_packed_equal_padded(model, tmp_path, neox)
