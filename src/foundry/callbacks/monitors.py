"""Small monitors: learning rate per param group, CUDA memory, and the remaining-time estimate.

Design note: these three are a few lines each, so they share a module; each reads the trainer and returns
Composer-named metrics (`lr-<Optimizer>/group<i>`, `memory/*` in GB, `time/remaining_estimate` in hours).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from foundry.callbacks.base import Callback
from foundry.callbacks.config import RuntimeEstimatorConfig

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["LRMonitor", "MemoryMonitor", "RuntimeEstimator"]


class LRMonitor(Callback):
    """Logs the learning rate of every parameter group after each step."""

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """`lr-<OptimizerClass>/group<i>`."""
        name = type(trainer.optimizer).__name__
        return {f"lr-{name}/group{i}": float(g["lr"]) for i, g in enumerate(trainer.optimizer.param_groups)}


class MemoryMonitor(Callback):
    """Logs CUDA allocator statistics in GB (nothing on CPU)."""

    _KEYS = {
        "allocated_bytes.all.current": "current_allocated_mem",
        "active_bytes.all.current": "current_active_mem",
        "reserved_bytes.all.current": "current_reserved_mem",
        "allocated_bytes.all.peak": "peak_allocated_mem",
        "reserved_bytes.all.peak": "peak_reserved_mem",
    }

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """`memory/<key>` in GB and `memory/alloc_retries`."""
        import torch

        if trainer.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(trainer.device)
        out = {f"memory/{name}": stats.get(key, 0) / 1e9 for key, name in self._KEYS.items()}
        out["memory/alloc_retries"] = float(stats.get("num_alloc_retries", 0))
        return out


class RuntimeEstimator(Callback):
    """Estimates the remaining wall-clock time from the training rate so far, excluding eval time.

    Args:
        cfg: Steps to skip before timing.
    """

    def __init__(self, cfg: RuntimeEstimatorConfig) -> None:
        self.cfg = cfg
        self._start: float | None = None
        self._start_step = 0
        self._eval_seconds = 0.0
        self._evals = 0

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """`time/remaining_estimate` (hours) once past the skipped steps."""
        step = trainer.state.step
        now = time.perf_counter()
        if step <= self.cfg.skip_steps or self._start is None:
            self._start, self._start_step, self._eval_seconds = now, step, 0.0
            return {}
        rate = (now - self._start - self._eval_seconds) / (step - self._start_step)
        remaining = rate * (trainer.max_steps - step)
        if self._evals and trainer.eval_interval_steps:
            per_eval = self._eval_seconds / self._evals
            remaining += per_eval * ((trainer.max_steps - step) // trainer.eval_interval_steps)
        return {"time/remaining_estimate": remaining / 3600}

    def on_eval_end(self, trainer: Trainer, *, eval_seconds: float) -> dict[str, float]:
        """Accumulates eval time (it does not count towards the training rate)."""
        self._eval_seconds += eval_seconds
        self._evals += 1
        return {}
