"""Loggers: console (progress bar), JSONL metrics file, W&B, MLflow, TensorBoard (optional); `build_loggers`.

Design note: the config enables any set of them at once (`logger=[console,mlflow,tensorboard]`: each
`conf/logger/*.yaml` sets only its own fields); the optional packages are imported when a logger is built, and
a missing one fails at build time naming its extra. `attach_final_metrics` runs after the loggers closed,
when the task has written `final_metrics.json` (MLflow takes it as an artifact).
"""

from __future__ import annotations

from pathlib import Path

from foundry.loggers.base import Logger
from foundry.loggers.config import LoggerConfig, MLflowConfig, TensorBoardConfig, WandbConfig
from foundry.loggers.console import ConsoleLogger
from foundry.loggers.jsonl import JsonlLogger, read_metrics
from foundry.loggers.mlflow import MLflowLogger
from foundry.loggers.mlflow import attach_final_metrics as _attach_mlflow_final_metrics
from foundry.loggers.tensorboard import TensorBoardLogger
from foundry.rundir import layout

__all__ = [
    "ConsoleLogger",
    "JsonlLogger",
    "Logger",
    "LoggerConfig",
    "MLflowConfig",
    "MLflowLogger",
    "TensorBoardConfig",
    "TensorBoardLogger",
    "WandbConfig",
    "attach_final_metrics",
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
        run_dir: The run directory (`metrics.jsonl`, `wandb/`, `tensorboard/`, `mlflow_run.json`).
        run_name: The W&B and MLflow run name (and the default MLflow experiment).
        max_steps: Progress-bar length.
        progress_bar: Draw a bar (else plain lines).
        resume_step: The step a resumed run continues from (the metrics file drops rows after it, TensorBoard
            purges them, MLflow continues the run of the same name).
        wandb_run_id: The W&B run a resumed run continues (recorded in its checkpoint).
    """
    loggers: list[Logger] = []
    if cfg.console:
        loggers.append(ConsoleLogger(max_steps=max_steps, progress_bar=progress_bar))
    if cfg.jsonl:
        loggers.append(JsonlLogger(run_dir / layout.METRICS, resume_step=resume_step))
    if cfg.wandb is not None:
        from foundry.loggers.wandb import WandbLogger

        loggers.append(WandbLogger(cfg.wandb, run_name=run_name, run_dir=run_dir, run_id=wandb_run_id))
    if cfg.mlflow is not None:
        resume = resume_step is not None
        loggers.append(MLflowLogger(cfg.mlflow, run_name=run_name, run_dir=run_dir, resume=resume))
    if cfg.tensorboard is not None:
        loggers.append(TensorBoardLogger(cfg.tensorboard, run_dir=run_dir, resume_step=resume_step))
    return loggers


def attach_final_metrics(cfg: LoggerConfig, run_dir: Path) -> None:
    """After the loggers closed and the task wrote `<run_dir>/final_metrics.json`: MLflow uploads it."""
    if cfg.mlflow is not None:
        _attach_mlflow_final_metrics(cfg.mlflow, run_dir)
