"""``build_optimizer(cfg, *, model)``: param groups, frozen params, weight decay.

Design note: the schemas, one per optimizer (``AdamWConfig``, ``DecoupledAdamWConfig``,
``DecoupledLionWConfig``, all subclasses of ``OptimizerConfig``), are in ``foundry.optim.config`` (re-exported
here); dispatch is by type.

Weight-decay exclusion is by *category* (``weight_decay_exclude: [norm, bias, embedding]``), decided from the
module tree instead of parameter-name regexes, so it works for any model:

- ``norm``: parameters owned by a module whose class name contains ``Norm``
  (LayerNorm, RMSNorm, LPLayerNorm...);
- ``embedding``: parameters owned by an ``nn.Embedding`` (a tied LM head shares the tensor, so it follows);
- ``bias``: every parameter with fewer than 2 dimensions (biases, and also 1-D norm gains).

A parameter matching any listed category goes to a ``no_decay`` group with ``weight_decay=0``. The default is
``[]`` (decay everything), which is what Composer/llm-foundry do.

llm-foundry's ordered ``param_groups: [{param_str_match, lr, ...}]`` are supported with typed overrides
(``lr``, ``weight_decay``, ``betas``, ``eps``): the first group whose regex is found in a parameter's name
takes it; unmatched parameters stay in the default groups, which come first. Each group is split by
weight-decay category as above.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from foundry.optim.config import (
    WEIGHT_DECAY_CATEGORIES,
    AdamWConfig,
    DecoupledAdamWConfig,
    DecoupledLionWConfig,
    OptimizerConfig,
    ParamGroupConfig,
)
from foundry.optim.decoupled import DecoupledAdamW, DecoupledLionW

__all__ = [
    "AdamWConfig",
    "DecoupledAdamWConfig",
    "DecoupledLionWConfig",
    "OptimizerConfig",
    "ParamGroupConfig",
    "WEIGHT_DECAY_CATEGORIES",
    "build_optimizer",
    "build_param_groups",
    "freeze_parameters",
]


def freeze_parameters(model: nn.Module, patterns: list[str]) -> list[str]:
    """Set ``requires_grad=False`` on every parameter whose name matches one of ``patterns`` (``re.search``).

    Args:
        model: The model whose parameters are frozen in place.
        patterns: Regexes (plain substrings work) searched in ``model.named_parameters()`` names.

    Returns:
        The names of the parameters frozen.
    """
    compiled = [re.compile(p) for p in patterns]
    frozen = []
    for name, p in model.named_parameters():
        if any(c.search(name) for c in compiled):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def _categories(model: nn.Module) -> dict[int, set[str]]:
    """Map ``id(param)`` to the weight-decay categories it belongs to, from every module that owns it."""
    cats: dict[int, set[str]] = {}
    for module in model.modules():
        owner = set()
        if "Norm" in type(module).__name__:
            owner.add("norm")
        if isinstance(module, nn.Embedding):
            owner.add("embedding")
        for p in module.parameters(recurse=False):
            found = cats.setdefault(id(p), set())
            found.update(owner)
            if p.ndim < 2:
                found.add("bias")
    return cats


def build_param_groups(
    model: nn.Module,
    *,
    weight_decay: float,
    exclude: list[str],
    param_groups: Sequence[ParamGroupConfig] = (),
) -> list[dict[str, Any]]:
    """Split the trainable parameters into param groups by override group and weight-decay category.

    Args:
        model: The model; only parameters with ``requires_grad`` are included
            (each tensor once, even if tied).
        weight_decay: Weight decay of the default ``decay`` group (``no_decay`` groups get 0).
        exclude: Categories that go to ``no_decay`` (see the module docstring).
        param_groups: Ordered overrides; the first whose ``param_str_match`` is found in a name takes it.

    Returns:
        Param-group dicts with ``params``, ``name`` and ``weight_decay`` (plus each override's keys): the
        default ``decay`` and ``no_decay`` groups, then ``param_groups[i].decay`` /
        ``param_groups[i].no_decay``; empty groups are left out.

    Raises:
        ValueError: If a ``param_str_match`` matches no trainable parameter (likely a typo).
    """
    cats = _categories(model)
    excluded = set(exclude)
    remaining = {name: p for name, p in model.named_parameters() if p.requires_grad}
    buckets: list[tuple[str, dict[str, Any], list[nn.Parameter]]] = []
    for i, group in enumerate(param_groups):
        pattern = re.compile(group.param_str_match)
        names = [name for name in remaining if pattern.search(name)]
        if not names:
            raise ValueError(
                f"optimizer.param_groups[{i}].param_str_match={group.param_str_match!r} matches no trainable "
                f"parameter of {type(model).__name__} (or earlier groups took them all); fix the pattern"
            )
        buckets.append((f"param_groups[{i}].", group.overrides(), [remaining.pop(n) for n in names]))
    buckets.insert(0, ("", {}, list(remaining.values())))
    groups = []
    for prefix, overrides, params in buckets:
        decay = [p for p in params if not cats.get(id(p), set()) & excluded]
        no_decay = [p for p in params if cats.get(id(p), set()) & excluded]
        group_wd = overrides.get("weight_decay", weight_decay)
        for suffix, members, wd in (("decay", decay, group_wd), ("no_decay", no_decay, 0.0)):
            if members:
                groups.append({**overrides, "params": members, "name": prefix + suffix, "weight_decay": wd})
    return groups


def build_optimizer(cfg: OptimizerConfig, *, model: nn.Module) -> Optimizer:
    """Build the optimizer described by ``cfg`` for ``model``'s trainable parameters.

    Freezes ``cfg.disable_grad`` matches first (in place, like llm-foundry), then groups the rest by
    ``cfg.param_groups`` and weight decay (see :func:`build_param_groups`).

    Args:
        cfg: One of :class:`AdamWConfig`, :class:`DecoupledAdamWConfig`, :class:`DecoupledLionWConfig`.
        model: The model to optimize.

    Returns:
        A torch optimizer; its param groups carry a ``name``
        (``decay``, ``no_decay``, ``param_groups[i].decay``...).

    Raises:
        ValueError: If nothing is left to train, a param group matches nothing, or ``cfg`` is not a known
            optimizer schema.
    """
    frozen = freeze_parameters(model, cfg.disable_grad) if cfg.disable_grad else []
    groups = build_param_groups(
        model, weight_decay=cfg.weight_decay, exclude=cfg.weight_decay_exclude, param_groups=cfg.param_groups
    )
    if not groups:
        raise ValueError(
            f"build_optimizer: {type(model).__name__} has no trainable parameters "
            f"(optimizer.disable_grad={cfg.disable_grad} froze {len(frozen)}); loosen disable_grad"
        )
    if isinstance(cfg, AdamWConfig):
        return torch.optim.AdamW(
            groups,
            lr=cfg.lr,
            betas=(cfg.betas[0], cfg.betas[1]),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            amsgrad=cfg.amsgrad,
            foreach=cfg.foreach,
            fused=cfg.fused,
        )
    if isinstance(cfg, DecoupledAdamWConfig):
        return DecoupledAdamW(
            groups,
            lr=cfg.lr,
            betas=(cfg.betas[0], cfg.betas[1]),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            amsgrad=cfg.amsgrad,
            foreach=cfg.foreach,
        )
    if isinstance(cfg, DecoupledLionWConfig):
        return DecoupledLionW(
            groups,
            lr=cfg.lr,
            betas=(cfg.betas[0], cfg.betas[1]),
            weight_decay=cfg.weight_decay,
            foreach=cfg.foreach,
        )
    raise ValueError(
        f"build_optimizer: unsupported optimizer config {type(cfg).__name__}; "
        "use AdamWConfig, DecoupledAdamWConfig or DecoupledLionWConfig"
    )
