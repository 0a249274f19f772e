"""Loggers: console (progress bar), JSONL metrics file, W&B (optional); `build_loggers` from the config."""

from __future__ import annotations

from pathlib import Path

from foundry.loggers.base import Logger, LoggerConfig, WandbConfig
from foundry.loggers.console import ConsoleLogger
from foundry.loggers.jsonl import JsonlLogger, read_metrics

__all__ = [
    "ConsoleLogger",
    "JsonlLogger",
    "Logger",
    "LoggerConfig",
    "WandbConfig",
    "build_loggers",
    "read_metrics",
]


def build_loggers(
    cfg: LoggerConfig,
    *,
    run_dir: Path,
    run_name: str,
    max_steps: int,
    progress_bar: bool = True,
    resume_step: int | None = None,
    wandb_run_id: str | None = None,
) -> list[Logger]:
    """The loggers `cfg` enables, writing under `run_dir`.

    Args:
        cfg: The logger config.
        run_dir: The run directory (`metrics.jsonl`, `wandb/`).
        run_name: The W&B run name.
        max_steps: Progress-bar length.
        progress_bar: Draw a bar (else plain lines).
        resume_step: The step a resumed run continues from (the metrics file drops rows after it).
        wandb_run_id: The W&B run a resumed run continues (recorded in its checkpoint).
    """
    loggers: list[Logger] = []
    if cfg.console:
        loggers.append(ConsoleLogger(max_steps=max_steps, progress_bar=progress_bar))
    if cfg.jsonl:
        loggers.append(JsonlLogger(run_dir / "metrics.jsonl", resume_step=resume_step))
    if cfg.wandb is not None:
        from foundry.loggers.wandb import WandbLogger

        loggers.append(WandbLogger(cfg.wandb, run_name=run_name, run_dir=run_dir, run_id=wandb_run_id))
    return loggers
