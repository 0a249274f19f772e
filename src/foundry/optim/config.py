"""The `optimizer` and `scheduler` groups' schemas: one typed dataclass per optimizer and per LR schedule.

Design note: one schema per optimizer (`AdamWConfig`, `DecoupledAdamWConfig`, `DecoupledLionWConfig`, all
subclasses of `OptimizerConfig`) and per schedule (subclasses of `SchedulerConfig`), so a typo fails at Hydra
compose time and the library only ever sees dataclasses; `TrainConfig.optimizer` / `.scheduler` are typed with
the bases. Each schema carries a `name` equal to llm-foundry's (Composer's) registry name, so a block pasted
from an llm-foundry YAML (`name: decoupled_adamw`) is accepted as is; dispatch is by type, and a `name` that
disagrees with the chosen schema is an error rather than a silent switch. Schedules keep Composer's duration
strings (`t_warmup: 100ba`, `t_max: 1dur`), checked here and converted to steps once by
`foundry.optim.schedulers.build_lr_lambda`. What the fields mean in the optimizer (weight-decay categories,
param groups) is `foundry.optim.optimizers`; which node each schema is, and their Hydra registration,
`foundry.optim` (`OPTIMIZER_SCHEMAS`, `SCHEDULER_SCHEMAS`, `register_optim_configs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from foundry.time import TimeUnit, parse_duration

__all__ = [
    "DECAY_SHAPES",
    "WEIGHT_DECAY_CATEGORIES",
    "AdamWConfig",
    "ConstantWithWarmupConfig",
    "CosineWithWarmupConfig",
    "DecoupledAdamWConfig",
    "DecoupledLionWConfig",
    "InvSqrtWithWarmupConfig",
    "LinearDecayWithWarmupConfig",
    "OptimizerConfig",
    "ParamGroupConfig",
    "SchedulerConfig",
    "WarmupStableDecayConfig",
]

WEIGHT_DECAY_CATEGORIES = ("norm", "bias", "embedding")
"""Values allowed in ``OptimizerConfig.weight_decay_exclude``."""
DECAY_SHAPES = ("linear", "cosine", "1-sqrt")
"""Values allowed in ``WarmupStableDecayConfig.decay_shape``."""


@dataclass(kw_only=True)
class ParamGroupConfig:
    """Per-group hyperparameters for the parameters whose names match ``param_str_match``
    (llm-foundry's key)."""

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
    """Fields every optimizer schema has. Use a subclass;
    this base is the type of ``TrainConfig.optimizer``."""

    name: str
    """llm-foundry registry name of the optimizer; fixed by each subclass
    (kept so pasted recipes validate)."""
    lr: float
    """Peak learning rate (the scheduler multiplies it)."""
    weight_decay: float = 0.0
    """Weight decay coefficient; its meaning depends on the optimizer
    (coupled for AdamW, decoupled otherwise)."""
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
                f"optimizer.name is {self.name!r} but the schema is {type(self).__name__} (name "
                f"{expected!r}); pick the optimizer with the config group (e.g. "
                "optimizer=decoupled-adamw), not the name field"
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


def _check_duration(field_name: str, text: str, *, allow_dur: bool = True) -> None:
    try:
        d = parse_duration(text)
    except ValueError as e:
        raise ValueError(f"scheduler.{field_name}: {e}") from None
    if not allow_dur and d.unit is TimeUnit.DURATION:
        raise ValueError(
            f"scheduler.{field_name}={text!r} must not be in 'dur' units (the schedule is meant to survive a "
            "change of max_duration); give it in ba, ep, sp or tok"
        )


@dataclass(kw_only=True)
class SchedulerConfig:
    """Fields every schedule has. Use a subclass; this base is the type of ``TrainConfig.scheduler``.

    Durations are time strings (``100ba``, ``1ep``, ``2e8tok``, ``0.01dur``; bare numbers are steps).
    """

    name: str
    """llm-foundry registry name of the schedule; fixed by each subclass (kept so pasted recipes validate)."""
    t_warmup: str
    """Warmup length: the multiplier ramps linearly from 0."""
    t_max: str = "1dur"
    """When the schedule ends (``1dur`` = the whole run); must not be shorter than the run."""
    scale_warmup: bool = False
    """Whether ``scale_schedule_ratio`` also scales the warmup (Composer's flag)."""

    def __post_init__(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if isinstance(expected, str) and self.name != expected:
            raise ValueError(
                f"scheduler.name is {self.name!r} but the schema is {type(self).__name__} (name "
                f"{expected!r}); pick the schedule with the config group (e.g. "
                "scheduler=cosine-warmup), not the name field"
            )
        _check_duration("t_warmup", self.t_warmup)
        _check_duration("t_max", self.t_max)


@dataclass(kw_only=True)
class ConstantWithWarmupConfig(SchedulerConfig):
    """Warmup to ``alpha``, then constant."""

    name: str = "constant_with_warmup"
    alpha: float = 1.0
    """The multiplier after warmup."""


@dataclass(kw_only=True)
class CosineWithWarmupConfig(SchedulerConfig):
    """Warmup to 1, then cosine decay to ``alpha_f`` at ``t_max``."""

    name: str = "cosine_with_warmup"
    alpha_f: float = 0.0
    """Final multiplier."""


@dataclass(kw_only=True)
class LinearDecayWithWarmupConfig(SchedulerConfig):
    """Warmup to ``alpha_i``, then linear to ``alpha_f`` at ``t_max``."""

    name: str = "linear_decay_with_warmup"
    alpha_i: float = 1.0
    """Multiplier at the end of warmup."""
    alpha_f: float = 0.0
    """Final multiplier."""


@dataclass(kw_only=True)
class InvSqrtWithWarmupConfig(SchedulerConfig):
    """llm-foundry's inverse-square-root schedule with linear cooldown (for continual pretraining)."""

    name: str = "inv_sqrt_with_warmup"
    t_scale: str
    """Time scale of the decay: the multiplier halves (toward ``alpha_f_decay``) after ``3·t_scale``."""
    t_cooldown: str
    """Length of the final linear cooldown (0 for none)."""
    alpha_f_decay: float = 0.0
    """What the inverse-sqrt decay tends to."""
    alpha_f_cooldown: float = 0.0
    """Multiplier at the end of the cooldown."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for field_name in ("t_warmup", "t_scale", "t_cooldown"):
            _check_duration(field_name, getattr(self, field_name), allow_dur=False)
        if self.alpha_f_decay < self.alpha_f_cooldown:
            raise ValueError(
                f"scheduler.alpha_f_decay ({self.alpha_f_decay}) must be >= alpha_f_cooldown "
                f"({self.alpha_f_cooldown}) so the LR never rises after warmup"
            )


@dataclass(kw_only=True)
class WarmupStableDecayConfig(SchedulerConfig):
    """Warmup, a constant plateau, then a decay over the last ``t_decay`` of the schedule."""

    name: str = "warmup_stable_decay"
    t_decay: str = "0.2dur"
    """Length of the final decay (``0.2dur`` = last 20% of the run)."""
    alpha_f: float = 0.0
    """Final multiplier."""
    decay_shape: str = "linear"
    """``linear``, ``cosine`` or ``1-sqrt``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_duration("t_decay", self.t_decay)
        if self.decay_shape not in DECAY_SHAPES:
            raise ValueError(
                f"scheduler.decay_shape must be one of {list(DECAY_SHAPES)}, got {self.decay_shape!r}"
            )
