"""Optimizers (AdamW, DecoupledAdamW, DecoupledLionW), LR schedules, and their Hydra schema registration.

Design note: the schemas (`config.py`, the `optimizer` and `scheduler` groups) are plain dataclasses, so this
package never imports Hydra; the caller (``foundry/config.py``) passes its ``ConfigStore`` to
:func:`register_optim_configs` explicitly, and nothing is registered at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foundry.optim.config import (
    AdamWConfig,
    ConstantWithWarmupConfig,
    CosineWithWarmupConfig,
    DecoupledAdamWConfig,
    DecoupledLionWConfig,
    InvSqrtWithWarmupConfig,
    LinearDecayWithWarmupConfig,
    OptimizerConfig,
    ParamGroupConfig,
    SchedulerConfig,
    WarmupStableDecayConfig,
)
from foundry.optim.decoupled import DecoupledAdamW, DecoupledLionW
from foundry.optim.optimizers import build_optimizer, build_param_groups
from foundry.optim.schedulers import build_lr_lambda, build_scheduler

if TYPE_CHECKING:
    from hydra.core.config_store import ConfigStore

__all__ = [
    "AdamWConfig",
    "ConstantWithWarmupConfig",
    "CosineWithWarmupConfig",
    "DecoupledAdamW",
    "DecoupledAdamWConfig",
    "DecoupledLionW",
    "DecoupledLionWConfig",
    "InvSqrtWithWarmupConfig",
    "LinearDecayWithWarmupConfig",
    "OptimizerConfig",
    "ParamGroupConfig",
    "SchedulerConfig",
    "WarmupStableDecayConfig",
    "build_lr_lambda",
    "build_optimizer",
    "build_param_groups",
    "build_scheduler",
    "register_optim_configs",
]

OPTIMIZER_SCHEMAS: dict[str, type[OptimizerConfig]] = {
    "_adamw": AdamWConfig,
    "_decoupled_adamw": DecoupledAdamWConfig,
    "_decoupled_lionw": DecoupledLionWConfig,
}
"""ConfigStore node name (group ``optimizer``) -> schema; option files start with ``defaults: [<name>]``."""

SCHEDULER_SCHEMAS: dict[str, type[SchedulerConfig]] = {
    "_constant_warmup": ConstantWithWarmupConfig,
    "_cosine_warmup": CosineWithWarmupConfig,
    "_linear_warmup": LinearDecayWithWarmupConfig,
    "_inv_sqrt_warmup": InvSqrtWithWarmupConfig,
    "_wsd": WarmupStableDecayConfig,
}
"""ConfigStore node name (group ``scheduler``) -> schema."""


def register_optim_configs(cs: ConfigStore) -> None:
    """Store the optimizer and scheduler schemas in ``cs`` (groups ``optimizer`` and ``scheduler``).

    Args:
        cs: Usually ``ConfigStore.instance()``, from ``foundry/config.py``.
    """
    for name, schema in OPTIMIZER_SCHEMAS.items():
        cs.store(group="optimizer", name=name, node=schema)
    for name, sched_schema in SCHEDULER_SCHEMAS.items():
        cs.store(group="scheduler", name=name, node=sched_schema)
