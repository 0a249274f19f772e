"""Parameter initialisation for MPT (llm-foundry's `init_config` schemes), one module at a time.

Design note: `init_module_` initialises a single module from its own parameters plus two markers set by the
layers (`_is_residual`, `_fused`), so it can serve both as transformers' per-module `_init_weights` (which
only touches modules whose weights were not loaded) and as a whole-model re-init after a meta-device build
(`init_model_`). Fused QKV weights are initialised slice by slice, as if Q, K and V were separate matrices,
so fan-in/fan-out based schemes see the right shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from foundry.models.config import InitConfig
from foundry.models.mpt.layers import FUSED_MARK, RESIDUAL_MARK

__all__ = ["init_module_", "init_model_", "scheme_fn", "residual_divisor"]


@runtime_checkable
class _ResetsBuffers(Protocol):
    """A module whose buffers are derived tables it can recompute (e.g. `PositionTables`)."""

    def reset_buffers(self) -> None: ...


def scheme_fn(cfg: InitConfig, *, d_model: int) -> Callable[[torch.Tensor], object] | None:
    """The weight initialiser of a scheme (None for `default_`, which defers to `reset_parameters`)."""
    name = cfg.name
    if name == "default_":
        return None
    if name == "baseline_":
        if cfg.init_std is None:
            raise ValueError("init_config.name=baseline_ needs init_config.init_std (e.g. 0.02)")
        return partial(nn.init.normal_, mean=0.0, std=float(cfg.init_std))
    if name in ("small_init_", "neox_init_"):
        return partial(nn.init.normal_, mean=0.0, std=math.sqrt(2 / (5 * d_model)))
    if name in ("kaiming_normal_", "kaiming_uniform_"):
        fn = getattr(nn.init, name)
        return partial(fn, a=cfg.init_gain, mode=cfg.fan_mode, nonlinearity=cfg.init_nonlinearity)
    if name in ("xavier_normal_", "xavier_uniform_"):
        return partial(getattr(nn.init, name), gain=cfg.init_gain)
    raise ValueError(f"init_config.name={name!r} is not supported")


def residual_divisor(cfg: InitConfig, *, n_layers: int) -> float:
    """Divisor for residual-output weights: neox n_layers/sqrt(10); True sqrt(2*n_layers); a number;
    False 1."""
    if cfg.name == "neox_init_":
        return n_layers / math.sqrt(10)
    div = cfg.init_div_is_residual
    if div is True:
        return math.sqrt(2 * n_layers)
    if div is False:
        return 1.0
    return float(div)


def _skip(t: torch.Tensor | None) -> bool:
    return t is None or t.is_meta or getattr(t, "_is_hf_initialized", False)


@torch.no_grad()
def _init_linear(module: nn.Linear, *, fn: Callable | None, div: float) -> None:
    if not _skip(module.weight):
        if fn is None:
            module.reset_parameters()
        else:
            dim, splits = getattr(module, FUSED_MARK, (0, []))
            bounds = [0, *splits, module.weight.shape[dim]]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                fn(module.weight.narrow(dim, lo, hi - lo))
        if getattr(module, RESIDUAL_MARK, False):
            module.weight.div_(div)
    if not _skip(module.bias):
        module.bias.zero_()


@torch.no_grad()
def _init_embedding(module: nn.Embedding, *, cfg: InitConfig, fn: Callable | None) -> None:
    if _skip(module.weight):
        return
    lim = cfg.emb_init_uniform_lim
    if cfg.emb_init_std is not None:
        module.weight.normal_(0.0, cfg.emb_init_std)
    elif lim is not None:
        lo, hi = (-float(lim), float(lim)) if isinstance(lim, int | float) else (float(lim[0]), float(lim[1]))
        module.weight.uniform_(lo, hi)
    elif fn is None:
        module.reset_parameters()
    else:
        fn(module.weight)
    if module.padding_idx is not None:
        module.weight[module.padding_idx].zero_()


@torch.no_grad()
def init_module_(module: nn.Module, *, cfg: InitConfig, d_model: int, n_layers: int) -> None:
    """Initialises the parameters owned directly by `module` (not its children).

    Linear weights use the scheme (per fused slice), residual outputs are divided by `residual_divisor`,
    biases are zeroed; embeddings use `emb_init_std` / `emb_init_uniform_lim` / the scheme; norms get weight
    1, bias 0; modules with `reset_buffers` (position tables) recompute them. Parameters flagged
    `_is_hf_initialized` (loaded by transformers) or on the meta device are left alone.
    """
    fn = scheme_fn(cfg, d_model=d_model)
    if isinstance(module, nn.Linear):
        _init_linear(module, fn=fn, div=residual_divisor(cfg, n_layers=n_layers))
    elif isinstance(module, nn.Embedding):
        _init_embedding(module, cfg=cfg, fn=fn)
    elif isinstance(module, _ResetsBuffers):
        module.reset_buffers()
    else:
        weight = getattr(module, "weight", None)
        if isinstance(weight, nn.Parameter) and weight.dim() == 1:
            if not _skip(weight):
                weight.fill_(1.0)
            bias = getattr(module, "bias", None)
            if isinstance(bias, torch.Tensor) and not _skip(bias):
                bias.zero_()


def init_model_(model: nn.Module, *, cfg: InitConfig, d_model: int, n_layers: int) -> None:
    """Initialises every module of `model` (e.g. after `to_empty` on a meta-built model)."""
    for module in model.modules():
        init_module_(module, cfg=cfg, d_model=d_model, n_layers=n_layers)
