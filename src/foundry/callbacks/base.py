"""The callback interface (the `callbacks` group's schema is in `foundry.callbacks.config`, re-exported).

Design note: a callback observes the trainer and *returns* metrics instead of calling loggers itself, so
the trainer merges them into one dict per step (one JSONL line, one W&B call) and callbacks stay
testable as plain functions of what they saw. Hooks: fit start, step end, eval end, fit end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foundry.callbacks.config import (
    CallbacksConfig,
    HFExportConfig,
    RuntimeEstimatorConfig,
    SpeedMonitorConfig,
)

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["Callback", "CallbacksConfig", "HFExportConfig", "SpeedMonitorConfig", "RuntimeEstimatorConfig"]


class Callback:
    """Base class with no-op hooks; `trainer` is the `foundry.train.Trainer` being run."""

    def on_fit_start(self, trainer: Trainer) -> None:
        """Before the first step."""

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """After each optimizer step; returns metrics to log at this step."""
        return {}

    def on_eval_end(self, trainer: Trainer, *, eval_seconds: float) -> dict[str, float]:
        """After each evaluation; returns metrics to log."""
        return {}

    def on_fit_end(self, trainer: Trainer) -> None:
        """After the last step."""
