"""Callbacks: speed monitor (throughput, MFU), LR monitor, memory monitor, runtime estimator."""

from __future__ import annotations

from foundry.callbacks.base import Callback, CallbacksConfig, RuntimeEstimatorConfig, SpeedMonitorConfig
from foundry.callbacks.monitors import LRMonitor, MemoryMonitor, RuntimeEstimator
from foundry.callbacks.speed import SpeedMonitor, peak_flops

__all__ = [
    "Callback",
    "CallbacksConfig",
    "LRMonitor",
    "MemoryMonitor",
    "RuntimeEstimator",
    "RuntimeEstimatorConfig",
    "SpeedMonitor",
    "SpeedMonitorConfig",
    "build_callbacks",
    "peak_flops",
]


def build_callbacks(cfg: CallbacksConfig, *, world_size: int) -> list[Callback]:
    """The callbacks `cfg` enables, in a fixed order (speed, lr, memory, runtime); `world_size`: ranks per step."""
    out: list[Callback] = []
    if cfg.speed_monitor is not None:
        out.append(SpeedMonitor(cfg.speed_monitor, world_size=world_size))
    if cfg.lr_monitor:
        out.append(LRMonitor())
    if cfg.memory_monitor:
        out.append(MemoryMonitor())
    if cfg.runtime_estimator is not None:
        out.append(RuntimeEstimator(cfg.runtime_estimator))
    return out
