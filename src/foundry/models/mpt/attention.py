"""MPT attention: fused-QKV grouped-query attention over `F.scaled_dot_product_attention`.

Design note: one attention class covers MHA, MQA and GQA (SDPA's `enable_gqa`, no K/V copies). The common
training case (causal, no ALiBi, no packing, no padding) passes `is_causal=True` and no mask, so SDPA can pick
its flash / fused CPU kernel. Everything else (ALiBi, sliding window, sequence ids, key padding, a KV cache
with several new tokens) is folded into ONE additive mask built once per forward by `build_attn_mask` and
shared by all layers. Position tables (ALiBi slopes, RoPE cos/sin sized to max_seq_len) are non-persistent
buffers of `PositionTables`, computed once, never per step.

SDPA's kernel (`attn_config.attn_impl`): `torch` leaves the choice to PyTorch's default order; `flash` and
`cudnn` put that kernel first (`sdpa_kernel(..., set_priority=True)` around the one call, traced by
torch.compile like any context manager), every other backend after it, so a call the first cannot serve
(a mask, an odd head dim, the CPU) falls back instead of failing. cuDNN's fused attention is the fast one on
Hopper (measured by `make gpu-check`; `trainer.speed=auto` picks it there).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from foundry.models.config import AttnConfig
from foundry.models.mpt.layers import build_norm, mark_fused, mark_residual

if TYPE_CHECKING:
    from transformers.cache_utils import Cache

__all__ = [
    "alibi_slopes",
    "rope_inv_freq",
    "apply_rope",
    "build_attn_mask",
    "PositionTables",
    "GroupedQueryAttention",
]


def alibi_slopes(n_heads: int, *, bias_max: float = 8.0) -> torch.Tensor:
    """ALiBi slopes, shape (n_heads,), fp32.

    For H' = 2^ceil(log2 H): slope_k = 2^(-k * bias_max / H'), k = 1..H'. When H is not a power of two the
    odd-indexed slopes come first, then the even ones, truncated to H (the HF / FasterTransformer order).
    """
    h_pow2 = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, h_pow2 + 1, dtype=torch.float32) * (bias_max / h_pow2)
    slopes = torch.pow(2.0, -m)
    if h_pow2 != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[0::2]])[:n_heads]
    return slopes


def rope_inv_freq(head_dim: int, *, theta: float, hf_config: dict | None = None) -> torch.Tensor:
    """RoPE inverse frequencies, shape (head_dim // 2,), with the HF scaling variants.

    `linear` divides positions by `factor` (= divides the frequencies); `llama3` rescales low frequencies
    (`factor`, `low_freq_factor`, `high_freq_factor`, `original_max_position_embeddings`); `dynamic` NTK only
    changes anything beyond max_seq_len, which the model never reaches, so it equals `no_scaling` here.
    """
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    cfg = hf_config or {}
    kind = cfg.get("type", "no_scaling")
    factor = float(cfg.get("factor", 1.0))
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        low, high = float(cfg.get("low_freq_factor", 1.0)), float(cfg.get("high_freq_factor", 4.0))
        old_len = float(cfg.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv.float()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates non-interleaved halves. x: (B, H, S, hd); cos/sin: (B or 1, 1, S, hd)."""
    return (x * cos + _rotate_half(x) * sin).to(x.dtype)


def build_attn_mask(
    *,
    q_len: int,
    k_len: int,
    dtype: torch.dtype,
    device: torch.device,
    alibi: torch.Tensor | None = None,
    sliding_window: int = -1,
    key_padding: torch.Tensor | None = None,
    sequence_id: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """The attention mask for one forward, shared by every layer.

    Query i (absolute position k_len - q_len + i) may see key j iff j <= its position, j is within the
    sliding window (position - w <= j), the key is not padding and both tokens share a sequence id.

    Args:
        q_len: new tokens S_q. k_len: keys S_k (cache + new). dtype/device: of the scores.
        alibi: slopes (H,) or None. sliding_window: -1 for none.
        key_padding: (B, S_k) bool, True = real token. sequence_id: (B, S_q) ints (needs q_len == k_len).

    Returns:
        `(mask, is_causal)`: `(None, True)` for plain causal self-attention, `(None, False)` for a single
        decode token with nothing else to mask, else an additive float mask of shape (B|1, H|1, S_q, S_k)
        (masked entries are `finfo.min`, not -inf, so fully padded rows stay finite).
    """
    windowed = 0 < sliding_window < k_len
    if alibi is None and not windowed and key_padding is None and sequence_id is None:
        if q_len == k_len:
            return None, True
        if q_len == 1:
            return None, False
    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    k_pos = torch.arange(k_len, device=device)[None, :]
    # (S_q, S_k)
    allowed = k_pos <= q_pos
    if windowed:
        allowed = allowed & (k_pos >= q_pos - sliding_window)
    # (1, 1, S_q, S_k)
    allowed = allowed[None, None]
    if sequence_id is not None:
        if q_len != k_len:
            raise ValueError("sequence_id masking needs the whole sequence (no KV cache); drop sequence_id")
        allowed = allowed & (sequence_id[:, None, :, None] == sequence_id[:, None, None, :])
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, :].bool()
    if alibi is None:
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    else:
        # b_j = (j - (S_k - 1)) * slope: equals -(i - j) * slope up to a per-row constant (softmax-invariant).
        dist = (k_pos - (k_len - 1)).to(torch.float32)
        mask = (alibi.to(device)[None, :, None, None] * dist[None, None]).to(dtype)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min), False


class PositionTables(nn.Module):
    """Non-persistent ALiBi slopes and RoPE cos/sin tables, sized to max_seq_len and computed once.

    Args:
        attn: attention options. n_heads: query heads. head_dim: per-head size. max_seq_len: table length.
    """

    alibi: torch.Tensor
    """(n_heads,) ALiBi slopes; registered only when `attn.alibi`."""
    cos: torch.Tensor
    """(max_seq_len, head_dim) RoPE cosines; registered only when `attn.rope`."""
    sin: torch.Tensor
    """(max_seq_len, head_dim) RoPE sines; registered only when `attn.rope`."""

    def __init__(self, attn: AttnConfig, *, n_heads: int, head_dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.attn = attn
        self.n_heads, self.head_dim, self.max_seq_len = n_heads, head_dim, max_seq_len
        if attn.alibi:
            self.register_buffer("alibi", torch.empty(n_heads), persistent=False)
        if attn.rope:
            self.register_buffer("cos", torch.empty(max_seq_len, head_dim), persistent=False)
            self.register_buffer("sin", torch.empty(max_seq_len, head_dim), persistent=False)
        self.reset_buffers()

    @torch.no_grad()
    def reset_buffers(self) -> None:
        """(Re)computes the tables in place; call after `to_empty` (meta init) or loading."""
        if next(self.buffers(), None) is None or next(self.buffers()).is_meta:
            return
        if self.attn.alibi:
            self.alibi.copy_(alibi_slopes(self.n_heads, bias_max=self.attn.alibi_bias_max))
        if self.attn.rope:
            hf_cfg = self.attn.rope_hf_config if self.attn.rope_impl == "hf" else None
            inv = rope_inv_freq(self.head_dim, theta=self.attn.rope_theta, hf_config=hf_cfg)
            freqs = torch.outer(torch.arange(self.max_seq_len, dtype=torch.float32), inv)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.cos.copy_(emb.cos())
            self.sin.copy_(emb.sin())

    def rope(
        self, position_ids: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos/sin for `position_ids` (B|1, S) as (B|1, 1, S, hd), or None without RoPE."""
        if not self.attn.rope:
            return None
        return self.cos[position_ids][:, None].to(dtype), self.sin[position_ids][:, None].to(dtype)


_FIRST = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
_ALL = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]


def sdpa_order(attn_impl: str) -> list[SDPBackend] | None:
    """SDPA's backends in priority order for `attn_impl` (its kernel first, then every other), or None
    (`torch`: PyTorch's own order)."""
    first = _FIRST.get(attn_impl)
    return None if first is None else [first, *(b for b in _ALL if b != first)]


class GroupedQueryAttention(nn.Module):
    """Fused-QKV attention with H query heads and Hk K/V heads (MHA: Hk=H, MQA: Hk=1).

    Args:
        d_model: hidden size. n_heads: H. kv_n_heads: Hk. attn: options. no_bias: drop Linear biases.
        norm_type/norm_eps: for qk_ln / qk_gn. layer_idx: this layer's slot in the KV cache.
    """

    def __init__(
        self,
        d_model: int,
        *,
        n_heads: int,
        kv_n_heads: int,
        attn: AttnConfig,
        no_bias: bool,
        norm_type: str,
        norm_eps: float,
        layer_idx: int,
    ) -> None:
        super().__init__()
        self.n_heads, self.kv_n_heads, self.head_dim = n_heads, kv_n_heads, d_model // n_heads
        self.kv_dim = kv_n_heads * self.head_dim
        self.layer_idx = layer_idx
        self.clip_qkv = attn.clip_qkv
        self.softmax_scale = attn.softmax_scale
        self.attn_pdrop = attn.attn_pdrop
        self.sdpa_order = sdpa_order(attn.attn_impl)
        self.Wqkv = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=not no_bias)
        mark_fused(self.Wqkv, dim=0, splits=[d_model, d_model + self.kv_dim])
        self.q_ln: nn.Module | None = None
        self.k_ln: nn.Module | None = None
        if attn.qk_ln or attn.qk_gn:
            q_dim, k_dim = (d_model, self.kv_dim) if attn.qk_ln else (self.head_dim, self.head_dim)
            self.q_ln = build_norm(norm_type, q_dim, eps=norm_eps, no_bias=no_bias)
            self.k_ln = build_norm(norm_type, k_dim, eps=norm_eps, no_bias=no_bias)
        self.per_head_norm = attn.qk_gn
        self.out_proj = nn.Linear(d_model, d_model, bias=not no_bias)
        mark_residual(self.out_proj)

    def forward(
        self,
        x: torch.Tensor,
        *,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        cache: Cache | None = None,
    ) -> torch.Tensor:
        """x: (B, S, d_model) -> (B, S, d_model). `cache` is a transformers `Cache` (updated in place)."""
        bsz, seq, d_model = x.shape
        qkv = self.Wqkv(x)
        if self.clip_qkv is not None:
            qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
        q, k, v = qkv.split([d_model, self.kv_dim, self.kv_dim], dim=-1)
        # both set, or both None
        q_ln, k_ln = self.q_ln, self.k_ln
        if q_ln is not None and k_ln is not None and not self.per_head_norm:
            q, k = q_ln(q), k_ln(k)
        q = q.view(bsz, seq, self.n_heads, self.head_dim)
        k = k.view(bsz, seq, self.kv_n_heads, self.head_dim)
        if q_ln is not None and k_ln is not None and self.per_head_norm:
            q, k = q_ln(q), k_ln(k)
        # (B, H, S, hd), (B, Hk, S, hd)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(bsz, seq, self.kv_n_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        if self.sdpa_order is None:
            out = self._sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        else:
            with sdpa_kernel(self.sdpa_order, set_priority=True):
                out = self._sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, seq, d_model))

    def _sdpa(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=self.attn_pdrop if self.training else 0.0,
            is_causal=is_causal and attn_mask is None,
            scale=self.softmax_scale,
            enable_gqa=self.kv_n_heads != self.n_heads,
        )
