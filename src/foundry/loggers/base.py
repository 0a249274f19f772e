"""The logger interface (the `logger` config group's schema is `foundry.loggers.config`, re-exported here).

Design note: a logger is anything with `log_hyperparameters`, `log_metrics` and `close` (a Protocol, not
a base class), so tests pass a list-collecting fake and W&B stays an optional import behind the same
three calls. Metric names follow Composer's (`loss/train/total`-style is simplified to `train/loss`,
`eval/loss`, `eval/perplexity`, `throughput/tokens_per_sec`, `lr-<Optimizer>/group0`, ...).
"""

from __future__ import annotations

from typing import Any, Protocol

from foundry.loggers.config import LoggerConfig, MLflowConfig, TensorBoardConfig, WandbConfig

__all__ = ["Logger", "LoggerConfig", "MLflowConfig", "TensorBoardConfig", "WandbConfig"]


class Logger(Protocol):
    """What the trainer calls on every logger."""

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Record the run's resolved configuration and derived quantities (once, at the start)."""

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """Record scalar metrics at optimizer step `step`."""

    def close(self) -> None:
        """Flush and release resources (end of the run)."""
