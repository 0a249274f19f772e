"""The MPT transformer block: pre-norm attention and FFN, each added back through dropout.

Design note: the block is the unit of activation checkpointing and FSDP wrapping (applied from
`foundry.parallel`, never here), so it takes only tensors and a cache handle and owns no masks or tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from foundry.models.mpt.attention import GroupedQueryAttention
from foundry.models.mpt.hf_config import MPTConfig
from foundry.models.mpt.layers import build_ffn, build_norm

if TYPE_CHECKING:
    from transformers.cache_utils import Cache

__all__ = ["MPTBlock"]


class MPTBlock(nn.Module):
    """`x = x + drop(attn(norm_1(x))); x = x + drop(ffn(norm_2(x)))`.

    Args:
        config: model config. layer_idx: position in the stack (KV-cache slot).
    """

    def __init__(self, config: MPTConfig, *, layer_idx: int) -> None:
        super().__init__()
        attn = config.attn
        self.norm_1 = build_norm(
            config.norm_type, config.d_model, eps=config.norm_eps, no_bias=config.no_bias
        )
        self.attn = GroupedQueryAttention(
            config.d_model,
            n_heads=config.n_heads,
            kv_n_heads=config.kv_n_heads,
            attn=attn,
            no_bias=config.no_bias,
            norm_type=config.norm_type,
            norm_eps=config.norm_eps,
            layer_idx=layer_idx,
        )
        self.norm_2 = build_norm(
            config.norm_type, config.d_model, eps=config.norm_eps, no_bias=config.no_bias
        )
        ffn = config.ffn
        self.ffn = build_ffn(
            ffn.ffn_type, config.d_model, config.ffn_hidden_size, act=ffn.ffn_act_fn, bias=not config.no_bias
        )
        self.resid_attn_dropout = nn.Dropout(config.resid_pdrop)
        self.resid_ffn_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        x: torch.Tensor,
        *,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        cache: Cache | None = None,
    ) -> torch.Tensor:
        """x: (B, S, d_model) -> (B, S, d_model)."""
        a = self.attn(
            self.norm_1(x),
            rope=rope,
            attn_mask=attn_mask,
            is_causal=is_causal,
            cache=cache,
        )
        x = x + self.resid_attn_dropout(a)
        return x + self.resid_ffn_dropout(self.ffn(self.norm_2(x)))
