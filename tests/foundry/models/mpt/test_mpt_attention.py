"""Attention against a naive softmax reference: causal, ALiBi, RoPE, GQA, sliding window, sequence ids, padding."""

from __future__ import annotations

import math

import pytest
import torch

from foundry.models.mpt.attention import (
    GroupedQueryAttention,
    PositionTables,
    alibi_slopes,
    apply_rope,
    build_attn_mask,
    rope_inv_freq,
)
from foundry.models.mpt.schema import AttnConfig

D, H, S, B = 32, 4, 12, 2


def naive_attention(q, k, v, *, alibi=None, window=-1, seq_id=None, key_pad=None, past=0):
    """Plain softmax(QK^T/sqrt(d) + bias) V with explicit loops over the mask rules. q: (B,H,Sq,hd)."""
    bsz, h, sq, hd = q.shape
    sk = k.shape[2]
    if k.shape[1] != h:
        rep = h // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    for b in range(bsz):
        for i in range(sq):
            qi = past + i
            for j in range(sk):
                ok = j <= qi and (window < 0 or j >= qi - window)
                if seq_id is not None:
                    ok = ok and bool(seq_id[b, i] == seq_id[b, j])
                if key_pad is not None:
                    ok = ok and bool(key_pad[b, j])
                if alibi is not None:
                    scores[b, :, i, j] += -(qi - j) * alibi
                if not ok:
                    scores[b, :, i, j] = float("-inf")
    return torch.softmax(scores, dim=-1) @ v


def _qkv(kv_heads=H, sq=S, sk=S):
    g = torch.Generator().manual_seed(0)
    hd = D // H
    return (
        torch.randn(B, H, sq, hd, generator=g),
        torch.randn(B, kv_heads, sk, hd, generator=g),
        torch.randn(B, kv_heads, sk, hd, generator=g),
    )


def _sdpa(q, k, v, mask, causal):
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=k.shape[1] != q.shape[1]
    )


@pytest.mark.parametrize(
    "case",
    [
        {},
        {"alibi": True},
        {"window": 3},
        {"seq_id": True},
        {"key_pad": True},
        {"kv_heads": 2},
        {"kv_heads": 1, "alibi": True, "window": 4},
        {"alibi": True, "seq_id": True},
    ],
)
def test_mask_matches_naive_reference(case):
    q, k, v = _qkv(kv_heads=case.get("kv_heads", H))
    slopes = alibi_slopes(H) if case.get("alibi") else None
    seq_id = torch.tensor([[0] * 5 + [1] * 4 + [2] * 3, [0] * 12]) if case.get("seq_id") else None
    key_pad = torch.ones(B, S, dtype=torch.bool)
    if case.get("key_pad"):
        key_pad[0, :3] = False  # left padding in row 0
    else:
        key_pad = None
    window = case.get("window", -1)
    mask, causal = build_attn_mask(
        q_len=S,
        k_len=S,
        dtype=torch.float32,
        device=q.device,
        alibi=slopes,
        sliding_window=window,
        key_padding=key_pad,
        sequence_id=seq_id,
    )
    got = _sdpa(q, k, v, mask, causal)
    ref = naive_attention(
        q,
        k,
        v,
        alibi=None if slopes is None else slopes.view(H),
        window=window,
        seq_id=seq_id,
        key_pad=key_pad,
    )
    if key_pad is not None:  # fully padded query rows are don't-care
        got, ref = got[:, :, 3:], ref[:, :, 3:]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_plain_causal_uses_is_causal_fast_path():
    mask, causal = build_attn_mask(q_len=S, k_len=S, dtype=torch.float32, device=torch.device("cpu"))
    assert mask is None and causal
    mask, causal = build_attn_mask(q_len=1, k_len=S, dtype=torch.float32, device=torch.device("cpu"))
    assert mask is None and not causal


@pytest.mark.parametrize("alibi", [False, True])
def test_mask_with_cache_offsets_queries(alibi):
    q, k, v = _qkv(sq=4, sk=S)
    slopes = alibi_slopes(H) if alibi else None
    mask, causal = build_attn_mask(q_len=4, k_len=S, dtype=torch.float32, device=q.device, alibi=slopes)
    ref = naive_attention(q, k, v, alibi=slopes, past=S - 4)
    torch.testing.assert_close(_sdpa(q, k, v, mask, causal), ref, atol=1e-5, rtol=1e-5)


def test_alibi_slopes_power_of_two_and_not():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0**-(k) for k in range(1, 9)]))
    s16 = alibi_slopes(16)
    s12 = alibi_slopes(12)
    expected = torch.cat([s16[1::2], s16[0::2]])[:12]
    assert torch.equal(s12, expected)


def test_rope_matches_complex_rotation():
    hd, theta = 8, 10000.0
    inv = rope_inv_freq(hd, theta=theta)
    pos = torch.arange(S).float()
    angles = torch.outer(pos, inv)  # (S, hd/2)
    x = torch.randn(1, 1, S, hd)
    emb = torch.cat([angles, angles], -1)
    got = apply_rope(x, emb.cos()[None, None], emb.sin()[None, None])
    # reference: pair (x[i], x[i + hd/2]) as a complex number rotated by angle
    z = torch.complex(x[..., : hd // 2], x[..., hd // 2 :]) * torch.polar(torch.ones_like(angles), angles)
    ref = torch.cat([z.real, z.imag], -1)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_rope_scaling_variants():
    base = rope_inv_freq(8, theta=10000.0)
    assert torch.allclose(
        rope_inv_freq(8, theta=10000.0, hf_config={"type": "linear", "factor": 2.0}), base / 2
    )
    assert torch.allclose(rope_inv_freq(8, theta=10000.0, hf_config={"type": "dynamic", "factor": 2.0}), base)
    l3 = rope_inv_freq(
        8, theta=10000.0, hf_config={"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}
    )
    assert l3[0] == base[0] and l3[-1] < base[-1]  # high frequencies kept, low ones scaled


@pytest.mark.parametrize("attn_type,kv", [("multihead_attention", None), ("grouped_query_attention", 2)])
def test_module_with_rope_matches_reference(attn_type, kv):
    torch.manual_seed(0)
    cfg = AttnConfig(attn_type=attn_type, kv_n_heads=kv, rope=True)
    kv_heads = kv or H
    attn = GroupedQueryAttention(
        D,
        n_heads=H,
        kv_n_heads=kv_heads,
        attn=cfg,
        no_bias=False,
        norm_type="layernorm",
        norm_eps=1e-5,
        layer_idx=0,
    )
    tables = PositionTables(cfg, n_heads=H, head_dim=D // H, max_seq_len=32)
    x = torch.randn(B, S, D)
    rope = tables.rope(torch.arange(S)[None], torch.float32)
    got = attn(x, rope=rope, attn_mask=None, is_causal=True)
    qkv = attn.Wqkv(x)
    hd = D // H
    q, k, v = qkv.split([D, kv_heads * hd, kv_heads * hd], -1)
    q = apply_rope(q.view(B, S, H, hd).transpose(1, 2), *rope)
    k = apply_rope(k.view(B, S, kv_heads, hd).transpose(1, 2), *rope)
    v = v.view(B, S, kv_heads, hd).transpose(1, 2)
    ref = attn.out_proj(naive_attention(q, k, v).transpose(1, 2).reshape(B, S, D))
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_clip_qkv_and_softmax_scale():
    cfg = AttnConfig(clip_qkv=0.01, softmax_scale=1e-9)
    attn = GroupedQueryAttention(
        D, n_heads=H, kv_n_heads=H, attn=cfg, no_bias=True, norm_type="layernorm", norm_eps=1e-5, layer_idx=0
    )
    x = torch.randn(1, S, D) * 100
    out = attn(x, is_causal=True)
    # scale ~0 -> uniform causal average of clipped values; |v| <= 0.01
    v = attn.Wqkv(x).clamp(-0.01, 0.01)[..., 2 * D :]
    avg = v.cumsum(1) / torch.arange(1, S + 1)[None, :, None]
    torch.testing.assert_close(out, attn.out_proj(avg), atol=1e-6, rtol=1e-4)


def test_qk_ln_and_qk_gn_build_norms():
    for opts, dims in (({"qk_ln": True}, (D, D)), ({"qk_gn": True}, (D // H, D // H))):
        attn = GroupedQueryAttention(
            D,
            n_heads=H,
            kv_n_heads=H,
            attn=AttnConfig(**opts),
            no_bias=False,
            norm_type="rmsnorm",
            norm_eps=1e-5,
            layer_idx=0,
        )
        assert (attn.q_ln.dim, attn.k_ln.dim) == dims
        assert attn(torch.randn(1, S, D)).shape == (1, S, D)
