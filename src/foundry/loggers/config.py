"""The `logger` config group's schema: which loggers a run uses (`LoggerConfig`) and each one's settings.

Design note: every logger is a nullable field, so `logger=[console,mlflow,tensorboard]` composes several
`conf/logger/*.yaml` files that each set only their own field; W&B, MLflow and TensorBoard stay optional
imports of the loggers themselves (`foundry.loggers`), never of this schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LoggerConfig", "MLflowConfig", "TensorBoardConfig", "WandbConfig"]


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
class MLflowConfig:
    """MLflow settings (`logger=mlflow`); the local default needs no server."""

    tracking_uri: str | None = None
    """null -> `MLFLOW_TRACKING_URI`, else `sqlite:///<cwd>/mlruns/mlflow.db`
    (artifacts beside it in `mlruns/`)."""
    experiment: str | None = None
    """The MLflow experiment (created if absent); null -> the run's `run_name`."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra run tags (redacted like everything else recorded)."""
    artifacts: bool = True
    """Upload `run.json`, `config.yaml`, `icl_results.md` and `final_metrics.json` to the run."""


@dataclass(kw_only=True)
class TensorBoardConfig:
    """TensorBoard settings (`logger=tensorboard`): event files, one folder per run."""

    log_dir: str | None = None
    """null -> `<run_dir>/tensorboard`; else `<log_dir>/<run folder name>`
    (`tensorboard --logdir <log_dir>`)."""
    flush_secs: int = 30
    """How often the event file is flushed (and at the end of the run)."""

    def __post_init__(self) -> None:
        if self.flush_secs < 1:
            raise ValueError(f"logger.tensorboard.flush_secs={self.flush_secs}: use a number of seconds >= 1")


@dataclass(kw_only=True)
class LoggerConfig:
    """Which loggers a run uses (the `logger` group)."""

    console: bool = True
    """Progress bar / lines on stderr."""
    jsonl: bool = True
    """`metrics.jsonl` in the run directory (one JSON object per logged step)."""
    wandb: WandbConfig | None = None
    """W&B run named `run_name` with the resolved config; null disables."""
    mlflow: MLflowConfig | None = None
    """MLflow run (experiment and run named from `run_name`) with params, metrics, artifacts;
    null disables."""
    tensorboard: TensorBoardConfig | None = None
    """TensorBoard event files (scalars, config as text); null disables."""
