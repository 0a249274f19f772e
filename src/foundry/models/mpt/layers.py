"""Norms and feed-forward layers of MPT.

Design note: every layer is a thin `nn.Module` over one fused torch op (`F.layer_norm`, `F.rms_norm`,
`nn.Linear`) so the CPU and GPU fast paths come from torch itself. The "low precision" norms trade a little
accuracy for bandwidth: under autocast they run in the autocast dtype instead of autocast's fp32 upcast.
Linear layers carry two marker attributes that `init.py` reads: `_is_residual` (scaled by depth) and
`_fused` (initialised slice by slice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FUSED_MARK",
    "RESIDUAL_MARK",
    "LayerNorm",
    "RMSNorm",
    "build_norm",
    "MPTMLP",
    "MPTGLU",
    "build_ffn",
    "mark_fused",
    "mark_residual",
    "resolve_activation",
]

RESIDUAL_MARK = "_is_residual"
"""Attribute flagging a Linear that writes into the residual stream (init divides its weight by depth)."""
FUSED_MARK = "_fused"
"""Attribute `(dim, split points)` of a fused Linear (init treats each slice as its own matrix)."""


def mark_residual(linear: nn.Linear) -> None:
    """Flags `linear` as a residual-branch output projection (read by `init.py`)."""
    setattr(linear, RESIDUAL_MARK, True)


def mark_fused(linear: nn.Linear, *, dim: int, splits: list[int]) -> None:
    """Records that `linear`'s weight is several matrices concatenated along `dim` at `splits`."""
    setattr(linear, FUSED_MARK, (dim, splits))


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    device_type = x.device.type
    if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


class LayerNorm(nn.Module):
    """LayerNorm with optional bias; `low_precision=True` runs it in the autocast dtype.

    Args:
        dim: normalised size. eps: epsilon. bias: learnable bias. low_precision: see module note.
    """

    def __init__(
        self, dim: int, *, eps: float = 1e-5, bias: bool = True, low_precision: bool = False
    ) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.low_precision = low_precision
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = _autocast_dtype(x) if self.low_precision else None
        if dtype is None:
            return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.layer_norm(x.to(dtype), (self.dim,), self.weight.to(dtype), bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm (weight only); `low_precision=True` runs it in the autocast dtype."""

    def __init__(self, dim: int, *, eps: float = 1e-5, low_precision: bool = False) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.low_precision = low_precision
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = _autocast_dtype(x) if self.low_precision else None
        if dtype is None:
            return F.rms_norm(x, (self.dim,), self.weight, self.eps)
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.rms_norm(x.to(dtype), (self.dim,), self.weight.to(dtype), self.eps)


def build_norm(norm_type: str, dim: int, *, eps: float, no_bias: bool) -> nn.Module:
    """Builds a norm by llm-foundry name (`layernorm`, `low_precision_layernorm`, `rmsnorm`,
    `low_precision_rmsnorm`)."""
    low = norm_type.startswith("low_precision_")
    if norm_type.endswith("layernorm"):
        return LayerNorm(dim, eps=eps, bias=not no_bias, low_precision=low)
    if norm_type.endswith("rmsnorm"):
        return RMSNorm(dim, eps=eps, low_precision=low)
    raise ValueError(f"norm_type={norm_type!r} is not supported")


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def resolve_activation(spec: dict[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """Turns `{name: gelu, approximate: none}` into a callable (any `torch.nn.functional` fn, or quick_gelu).

    Raises:
        ValueError: when the name is not a torch.nn.functional function.
    """
    kwargs = {k: v for k, v in spec.items() if k != "name"}
    name = spec["name"]
    if name == "quick_gelu":
        return _quick_gelu
    fn = getattr(F, name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"ffn_config.ffn_act_fn.name={name!r} is not a torch.nn.functional function")
    if not kwargs:
        return fn
    return lambda x: fn(x, **kwargs)


class MPTMLP(nn.Module):
    """`down(act(up(x)))`."""

    def __init__(self, d_model: int, hidden: int, *, act: dict[str, Any], bias: bool) -> None:
        super().__init__()
        self.up_proj = nn.Linear(d_model, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, d_model, bias=bias)
        mark_residual(self.down_proj)
        self.act = resolve_activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


class MPTGLU(MPTMLP):
    """`down(act(gate(x)) * up(x))` (SwiGLU when the activation is silu)."""

    def __init__(self, d_model: int, hidden: int, *, act: dict[str, Any], bias: bool) -> None:
        super().__init__(d_model, hidden, act=act, bias=bias)
        self.gate_proj = nn.Linear(d_model, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def build_ffn(ffn_type: str, d_model: int, hidden: int, *, act: dict[str, Any], bias: bool) -> nn.Module:
    """Builds the FFN by llm-foundry name (`mptmlp` or `mptglu`)."""
    cls = {"mptmlp": MPTMLP, "mptglu": MPTGLU}.get(ffn_type)
    if cls is None:
        raise ValueError(f"ffn_config.ffn_type={ffn_type!r} is not supported; use mptmlp or mptglu")
    return cls(d_model, hidden, act=act, bias=bias)
