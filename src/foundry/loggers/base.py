"""The logger interface and the `logger` config group schema.

Design note: a logger is anything with `log_hyperparameters`, `log_metrics` and `close` (a Protocol, not
a base class), so tests pass a list-collecting fake and W&B stays an optional import behind the same
three calls. Metric names follow Composer's (`loss/train/total`-style is simplified to `train/loss`,
`eval/loss`, `eval/perplexity`, `throughput/tokens_per_sec`, `lr-<Optimizer>/group0`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Logger", "LoggerConfig", "WandbConfig"]


class Logger(Protocol):
    """What the trainer calls on every logger."""

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Record the run's resolved configuration and derived quantities (once, at the start)."""

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """Record scalar metrics at optimizer step `step`."""

    def close(self) -> None:
        """Flush and release resources (end of the run)."""


@dataclass(kw_only=True)
class WandbConfig:
    """Weights & Biases settings (`logger=wandb`); `WANDB_MODE=offline` works without network or login."""

    project: str = "foundry"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    mode: str | None = None
    """`online`, `offline` or `disabled`; null -> the `WANDB_MODE` environment variable (default online)."""

    def __post_init__(self) -> None:
        if self.mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"logger.wandb.mode={self.mode!r}: use online, offline, disabled or null")


@dataclass(kw_only=True)
class LoggerConfig:
    """Which loggers a run uses (the `logger` group)."""

    console: bool = True
    """Progress bar / lines on stderr."""
    jsonl: bool = True
    """`metrics.jsonl` in the run directory (one JSON object per logged step)."""
    wandb: WandbConfig | None = None
    """W&B run named `run_name` with the resolved config; null disables."""
