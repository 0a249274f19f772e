"""Optimizer config schemas and ``build_optimizer(cfg, *, model)``: param groups, frozen params, weight decay.

Design note: one typed schema per optimizer (``AdamWConfig``, ``DecoupledAdamWConfig``, ``DecoupledLionWConfig``,
all subclasses of ``OptimizerConfig``) so a typo fails at Hydra compose time and the library only ever sees
dataclasses. Each schema carries a ``name`` equal to llm-foundry's registry name, so an ``optimizer:`` block
pasted from an llm-foundry YAML (``name: decoupled_adamw``) is accepted as is; dispatch is by type, and a
``name`` that disagrees with the chosen schema is an error rather than a silent switch.

Weight-decay exclusion is by *category* (``weight_decay_exclude: [norm, bias, embedding]``), decided from the
module tree instead of parameter-name regexes, so it works for any model:

- ``norm``: parameters owned by a module whose class name contains ``Norm`` (LayerNorm, RMSNorm, LPLayerNorm...);
- ``embedding``: parameters owned by an ``nn.Embedding`` (a tied LM head shares the tensor, so it follows);
- ``bias``: every parameter with fewer than 2 dimensions (biases, and also 1-D norm gains).

A parameter matching any listed category goes to a ``no_decay`` group with ``weight_decay=0``. The default is
``[]`` (decay everything), which is what Composer/llm-foundry do.

llm-foundry's ordered ``param_groups: [{param_str_match, lr, ...}]`` are supported with typed overrides
(``lr``, ``weight_decay``, ``betas``, ``eps``): the first group whose regex is found in a parameter's name takes
it; unmatched parameters stay in the default groups, which come first. Each group is split by weight-decay
category as above.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

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

WEIGHT_DECAY_CATEGORIES = ("norm", "bias", "embedding")
"""Values allowed in ``OptimizerConfig.weight_decay_exclude``."""


@dataclass(kw_only=True)
class ParamGroupConfig:
    """Per-group hyperparameters for the parameters whose names match ``param_str_match`` (llm-foundry's key)."""

    param_str_match: str
    """Regex searched in parameter names (a plain substring works); the first matching group wins."""
    lr: float | None = None
    """Peak lr of this group; None inherits the optimizer's."""
    weight_decay: float | None = None
    """Weight decay of this group (its excluded categories still get 0); None inherits."""
    betas: list[float] | None = None
    """Betas of this group; None inherits."""
    eps: float | None = None
    """Epsilon of this group (Adam variants only); None inherits."""

    def overrides(self) -> dict[str, Any]:
        """The hyperparameters this group sets, as optimizer param-group keys."""
        out: dict[str, Any] = {}
        for key in ("lr", "weight_decay", "betas", "eps"):
            value = getattr(self, key)
            if value is not None:
                out[key] = tuple(value) if key == "betas" else value
        return out


@dataclass(kw_only=True)
class OptimizerConfig:
    """Fields every optimizer schema has. Use a subclass; this base is the type of ``TrainConfig.optimizer``."""

    name: str
    """llm-foundry registry name of the optimizer; fixed by each subclass (kept so pasted recipes validate)."""
    lr: float
    """Peak learning rate (the scheduler multiplies it)."""
    weight_decay: float = 0.0
    """Weight decay coefficient; its meaning depends on the optimizer (coupled for AdamW, decoupled otherwise)."""
    weight_decay_exclude: list[str] = field(default_factory=list)
    """Parameter categories that get no weight decay: any of ``norm``, ``bias``, ``embedding``."""
    disable_grad: list[str] = field(default_factory=list)
    """Regexes searched in parameter names (a plain substring works); matches get ``requires_grad=False``."""
    param_groups: list[ParamGroupConfig] = field(default_factory=list)
    """Ordered per-group overrides (llm-foundry's ``param_groups``); first match wins."""

    def __post_init__(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if isinstance(expected, str) and self.name != expected:
            raise ValueError(
                f"optimizer.name is {self.name!r} but the schema is {type(self).__name__} (name {expected!r}); "
                f"pick the optimizer with the config group (e.g. optimizer=decoupled-adamw), not the name field"
            )
        unknown = [c for c in self.weight_decay_exclude if c not in WEIGHT_DECAY_CATEGORIES]
        if unknown:
            raise ValueError(
                f"optimizer.weight_decay_exclude has unknown categories {unknown}; "
                f"allowed: {list(WEIGHT_DECAY_CATEGORIES)}"
            )
        for pattern in self.disable_grad:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(
                    f"optimizer.disable_grad entry {pattern!r} is not a valid regex: {e}"
                ) from None
        _check_common(self, "optimizer")
        for i, group in enumerate(self.param_groups):
            where = f"optimizer.param_groups[{i}]"
            try:
                re.compile(group.param_str_match)
            except re.error as e:
                raise ValueError(
                    f"{where}.param_str_match {group.param_str_match!r} is not a valid regex: {e}"
                ) from None
            if group.eps is not None and not hasattr(self, "eps"):
                raise ValueError(f"{where}.eps is set but {type(self).__name__} has no eps; remove it")
            _check_common(group, where)


def _check_common(cfg: OptimizerConfig | ParamGroupConfig, where: str) -> None:
    """Range checks shared by optimizer schemas and param-group overrides (None = not set)."""
    for key in ("lr", "weight_decay", "eps"):
        value = getattr(cfg, key, None)
        if value is not None and value < 0:
            raise ValueError(f"{where}.{key} must be >= 0, got {value}")
    betas = getattr(cfg, "betas", None)
    if betas is not None and (len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas)):
        raise ValueError(f"{where}.betas must be two numbers in [0, 1), got {list(betas)}")


@dataclass(kw_only=True)
class AdamWConfig(OptimizerConfig):
    """``torch.optim.AdamW`` (decay multiplied by lr: ``p ← p·(1 − lr·wd)``). Defaults are torch's."""

    name: str = "adamw"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """Coefficients of the running averages of the gradient and its square."""
    eps: float = 1e-8
    """Added to the denominator for numerical stability."""
    weight_decay: float = 1e-2
    amsgrad: bool = False
    """Use the running maximum of the second moment."""
    foreach: bool | None = None
    """Torch's multi-tensor path; None lets torch choose."""
    fused: bool | None = None
    """Torch's fused kernel (CUDA/CPU); None lets torch choose."""


@dataclass(kw_only=True)
class DecoupledAdamWConfig(OptimizerConfig):
    """:class:`~foundry.optim.decoupled.DecoupledAdamW` (Composer's). Defaults are Composer's."""

    name: str = "decoupled_adamw"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """Coefficients of the running averages of the gradient and its square."""
    eps: float = 1e-8
    """Added to the denominator for numerical stability."""
    weight_decay: float = 1e-5
    amsgrad: bool = False
    """Use the running maximum of the second moment."""
    foreach: bool | None = None
    """Multi-tensor path; None picks it when every parameter is on CUDA."""


@dataclass(kw_only=True)
class DecoupledLionWConfig(OptimizerConfig):
    """:class:`~foundry.optim.decoupled.DecoupledLionW` (llm-foundry's). Defaults are llm-foundry's."""

    name: str = "decoupled_lionw"
    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    """``β1`` interpolates the update direction, ``β2`` the stored momentum."""
    weight_decay: float = 0.0
    foreach: bool | None = None
    """Multi-tensor path; None picks it when every parameter is on CUDA."""


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
        model: The model; only parameters with ``requires_grad`` are included (each tensor once, even if tied).
        weight_decay: Weight decay of the default ``decay`` group (``no_decay`` groups get 0).
        exclude: Categories that go to ``no_decay`` (see the module docstring).
        param_groups: Ordered overrides; the first whose ``param_str_match`` is found in a name takes it.

    Returns:
        Param-group dicts with ``params``, ``name`` and ``weight_decay`` (plus each override's keys): the default
        ``decay`` and ``no_decay`` groups, then ``param_groups[i].decay`` / ``param_groups[i].no_decay``;
        empty groups are left out.

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
        A torch optimizer; its param groups carry a ``name`` (``decay``, ``no_decay``, ``param_groups[i].decay``...).

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
