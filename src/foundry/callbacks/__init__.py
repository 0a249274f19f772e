"""Callbacks: speed monitor (throughput, MFU), LR monitor, memory monitor, runtime estimator, HF export."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.callbacks.base import Callback
from foundry.callbacks.config import (
    CallbacksConfig,
    HFExportConfig,
    RuntimeEstimatorConfig,
    SpeedMonitorConfig,
)
from foundry.callbacks.heartbeat import HEARTBEAT_ENV, Heartbeat
from foundry.callbacks.hf_export import HFExport
from foundry.callbacks.liveness import Liveness
from foundry.callbacks.monitors import LRMonitor, MemoryMonitor, RuntimeEstimator
from foundry.callbacks.speed import SpeedMonitor, peak_flops

if TYPE_CHECKING:
    from foundry.models import ModelConfig

__all__ = [
    "Callback",
    "CallbacksConfig",
    "HFExport",
    "Heartbeat",
    "HFExportConfig",
    "LRMonitor",
    "Liveness",
    "MemoryMonitor",
    "RuntimeEstimator",
    "RuntimeEstimatorConfig",
    "SpeedMonitor",
    "SpeedMonitorConfig",
    "build_callbacks",
    "peak_flops",
]


def build_callbacks(
    cfg: CallbacksConfig,
    *,
    world_size: int,
    # the run's `model` schema
    model_config: ModelConfig | None = None,
    # a transformers tokenizer
    tokenizer: Any = None,
    run_dir: str | Path = ".",
) -> list[Callback]:
    """The callbacks `cfg` enables, in a fixed order
    (speed, lr, memory, runtime, hf export, heartbeat, liveness).

    Args:
        cfg: The `callbacks` group. world_size: Ranks per step.
        model_config, tokenizer, run_dir: What `hf_export` needs (the model schema is required for it).
    """
    out: list[Callback] = []
    if cfg.speed_monitor is not None:
        out.append(SpeedMonitor(cfg.speed_monitor, world_size=world_size))
    if cfg.lr_monitor:
        out.append(LRMonitor())
    if cfg.memory_monitor:
        out.append(MemoryMonitor())
    if cfg.runtime_estimator is not None:
        out.append(RuntimeEstimator(cfg.runtime_estimator))
    if cfg.hf_export is not None:
        if model_config is None:
            raise ValueError(
                "callbacks.hf_export needs the run's model config (build_callbacks(model_config=...))"
            )
        out.append(HFExport(cfg.hf_export, model_config=model_config, tokenizer=tokenizer, run_dir=run_dir))
    # set by the supervised launcher's worker entry (foundry.launch)
    if os.environ.get(HEARTBEAT_ENV):
        out.append(Heartbeat(os.environ[HEARTBEAT_ENV]))
    # always: `foundry.runs` state
    out.append(Liveness(run_dir, rank=int(os.environ.get("RANK", "0"))))
    return out
