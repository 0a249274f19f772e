"""MPTForCausalLM: KV-cache decoding = full recompute, generate, loss, save/load, meta init, init schemes, overfit."""

from __future__ import annotations

import math

import pytest
import torch

from foundry.models import load_pretrained, materialize_
from foundry.models.cache_names import output_cache
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.mpt.model import shifted_cross_entropy

V = 256


def tiny(**kw) -> MPTConfig:
    base = {"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": V, "max_seq_len": 64}
    base.update(kw)
    return MPTConfig(**base)


VARIANTS = {
    "learned_pos": {},
    "alibi": {"attn_config": {"alibi": True}},
    "rope_dail": {"attn_config": {"rope": True}},
    "rope_hf_llama3_gqa": {
        "attn_config": {
            "rope": True,
            "rope_impl": "hf",
            "rope_hf_config": {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 32},
            "attn_type": "grouped_query_attention",
            "kv_n_heads": 2,
        }
    },
    "mqa_window_qkln": {
        "attn_config": {
            "attn_type": "multiquery_attention",
            "sliding_window_size": 5,
            "qk_ln": True,
            "alibi": True,
        }
    },
    "glu_rms_nobias_untied": {
        "ffn_config": {"ffn_type": "mptglu", "ffn_act_fn": {"name": "silu"}},
        "norm_type": "rmsnorm",
        "no_bias": True,
        "tie_word_embeddings": False,
        "logit_scale": "inv_sqrt_d_model",
        "final_logit_softcapping": 30.0,
    },
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request) -> MPTForCausalLM:
    torch.manual_seed(0)
    return MPTForCausalLM(tiny(**VARIANTS[request.param])).eval()


@torch.no_grad()
def test_kv_cache_decoding_equals_full_recompute(model):
    ids = torch.randint(0, V, (2, 20))
    full = model(ids).logits
    out = model(ids[:, :8], use_cache=True)
    steps = [out.logits]
    cache = output_cache(out)
    chunk = model(ids[:, 8:12], past_key_values=cache, use_cache=True)  # multi-token step, old name
    steps.append(chunk.logits)
    for t in range(12, 20):
        step = model(ids[:, t : t + 1], cache=cache, use_cache=True)  # transformers >= 5.24's name
        steps.append(step.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)


@torch.no_grad()
def test_generate_greedy_matches_manual_argmax(model):
    ids = torch.randint(0, V, (1, 6))
    gen = model.generate(ids, max_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=0)
    seq = ids
    for _ in range(6):
        nxt = model(seq).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(gen, seq)


@torch.no_grad()
def test_left_padding_does_not_change_logits():
    torch.manual_seed(0)
    for variant in ("learned_pos", "alibi", "rope_dail"):
        m = MPTForCausalLM(tiny(**VARIANTS[variant])).eval()
        ids = torch.randint(1, V, (1, 10))
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 10, dtype=torch.long)], 1)
        torch.testing.assert_close(
            m(padded, attention_mask=mask).logits[:, 3:], m(ids).logits, atol=1e-5, rtol=1e-4
        )


def test_loss_shifts_labels_and_ignores_minus_100():
    logits = torch.randn(2, 5, V)
    labels = torch.randint(0, V, (2, 5))
    labels[0, 2] = -100
    ref_logits = logits[:, :-1].reshape(-1, V)
    ref = torch.nn.functional.cross_entropy(ref_logits, labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(shifted_cross_entropy(logits, labels), ref)
    assert shifted_cross_entropy(logits, torch.full_like(labels, -100)).item() == 0.0


def test_sequence_id_isolates_packed_documents():
    torch.manual_seed(0)
    m = MPTForCausalLM(tiny(attn_config={"attn_uses_sequence_id": True, "alibi": True})).eval()
    a, b = torch.randint(0, V, (1, 7)), torch.randint(0, V, (1, 9))
    packed = torch.cat([a, b], 1)
    seq_id = torch.tensor([[0] * 7 + [1] * 9])
    with torch.no_grad():
        got = m(packed, sequence_id=seq_id).logits
        torch.testing.assert_close(got[:, :7], m(a).logits, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got[:, 7:], m(b).logits, atol=1e-5, rtol=1e-4)
    m.train()
    with pytest.raises(ValueError, match="sequence_id"):
        m(packed)


def test_save_and_auto_from_pretrained_round_trip(tmp_path):
    torch.manual_seed(0)
    m = MPTForCausalLM(tiny(**VARIANTS["glu_rms_nobias_untied"])).eval()
    m.save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path).eval()
    assert type(loaded) is MPTForCausalLM
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, m(ids).logits, atol=0, rtol=0)
    tied = MPTForCausalLM(tiny(attn_config={"rope": True})).eval()
    tied.save_pretrained(tmp_path / "tied")
    again = load_pretrained(tmp_path / "tied")
    assert again.config.tie_word_embeddings and again.lm_head is None
    torch.testing.assert_close(again.transformer.pos.cos, tied.transformer.pos.cos)
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, tied(ids).logits, atol=0, rtol=0)


def test_meta_init_then_materialize():
    with torch.device("meta"):
        m = MPTForCausalLM(tiny(attn_config={"alibi": True}))
    assert all(p.is_meta for p in m.parameters())
    materialize_(m, device="cpu")
    assert not any(p.is_meta for p in m.parameters())
    assert torch.isfinite(m.transformer.pos.alibi).all() and m.transformer.pos.alibi[0] == 0.25  # 2^(-8/4)
    assert m(torch.randint(0, V, (1, 8))).logits.isfinite().all()


@pytest.mark.parametrize(
    "init,check",
    [
        ({"name": "small_init_"}, lambda w, d, L: math.sqrt(2 / (5 * d))),
        ({"name": "baseline_", "init_std": 0.02}, lambda w, d, L: 0.02),
        ({"name": "kaiming_normal_", "init_gain": 0.0}, lambda w, d, L: math.sqrt(2 / w.shape[1])),
    ],
)
def test_init_schemes_std_and_residual_scaling(init, check):
    torch.manual_seed(0)
    d, L = 256, 4
    m = MPTForCausalLM(tiny(d_model=d, n_layers=L, init_config=init))
    block = m.transformer.blocks[0]
    up = block.ffn.up_proj.weight
    assert up.std().item() == pytest.approx(check(up, d, L), rel=0.05)
    down = block.ffn.down_proj.weight
    assert down.std().item() == pytest.approx(check(down, d, L) / math.sqrt(2 * L), rel=0.05)
    assert torch.all(block.attn.Wqkv.bias == 0) and torch.all(block.norm_1.weight == 1)


def test_emb_init_std_and_num_params_and_flops():
    m = MPTForCausalLM(tiny(d_model=128, init_config={"emb_init_std": 0.5}))
    assert m.transformer.wte.weight.std().item() == pytest.approx(0.5, rel=0.05)
    n = m.num_params()
    assert n == sum(p.numel() for p in m.parameters())
    assert m.flops_per_token(64) == 3 * (2 * n + 4 * 2 * 128 * 64)


def test_embedding_fraction_scales_embedding_grad():
    torch.manual_seed(0)
    ids = torch.randint(0, V, (2, 8))
    grads = []
    for frac in (1.0, 0.25):
        torch.manual_seed(0)
        m = MPTForCausalLM(tiny(embedding_fraction=frac, tie_word_embeddings=False))
        m(ids, labels=ids).loss.backward()
        grads.append(m.transformer.wte.weight.grad.clone())
    torch.testing.assert_close(grads[1], grads[0] * 0.25, atol=1e-6, rtol=1e-4)


def test_tiny_model_overfits_one_batch():
    torch.manual_seed(0)
    m = MPTForCausalLM(tiny(attn_config={"alibi": True}))
    ids = torch.randint(0, V, (4, 32))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        loss = m(ids, labels=ids).loss
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 5.0 and loss.item() < 0.5


def test_too_long_input_names_max_seq_len():
    m = MPTForCausalLM(tiny(max_seq_len=16))
    with pytest.raises(ValueError, match="max_seq_len=16"):
        m(torch.zeros(1, 17, dtype=torch.long))


@torch.no_grad()
def test_batched_left_padded_generate_matches_single():
    torch.manual_seed(0)
    for variant in ("learned_pos", "rope_dail", "alibi"):
        m = MPTForCausalLM(tiny(**VARIANTS[variant])).eval()
        a, b = torch.randint(1, V, (1, 7)), torch.randint(1, V, (1, 4))
        batch = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
        mask = (torch.arange(7)[None] >= torch.tensor([[0], [3]])).long()
        kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
        out = m.generate(batch, attention_mask=mask, **kw)
        assert torch.equal(out[0:1, 7:], m.generate(a, **kw)[:, 7:])
        assert torch.equal(out[1:2, 7:], m.generate(b, **kw)[:, 4:])


@pytest.mark.parametrize("norm_type", ["low_precision_layernorm", "low_precision_rmsnorm"])
def test_cpu_bf16_autocast_train_step(norm_type):
    torch.manual_seed(0)
    m = MPTForCausalLM(tiny(norm_type=norm_type, attn_config={"alibi": True, "attn_impl": "flash"}))
    ids = torch.randint(0, V, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(ids, labels=ids)
    assert out.logits.dtype == torch.bfloat16 and out.loss.isfinite()
    out.loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in m.parameters())
