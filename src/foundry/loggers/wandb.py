"""Weights & Biases logger (optional dependency `wandb`, imported only when `logger=wandb`).

Design note: W&B is just another `Logger`; offline mode (`WANDB_MODE=offline` or `logger.wandb.mode`)
writes `<run_dir>/wandb/offline-run-*` for a later `wandb sync`, so it works with no network or login.
The W&B run name is the run's `run_name` and the resolved config is its `config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundry.loggers.base import WandbConfig

__all__ = ["WandbLogger"]


class WandbLogger:
    """Logs to a W&B run.

    Args:
        cfg: Project/entity/group/tags/mode.
        run_name: The W&B run name.
        run_dir: W&B's files go to `<run_dir>/wandb`.
        run_id: Continue this W&B run (a resumed training run passes the id its checkpoint recorded).
    """

    def __init__(
        self, cfg: WandbConfig, *, run_name: str, run_dir: str | Path, run_id: str | None = None
    ) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "logger=wandb needs the wandb package: pip install 'foundry-stack[wandb]'"
            ) from e
        self._wandb = wandb
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group,
            tags=list(cfg.tags) or None,
            name=run_name,
            dir=str(run_dir),
            mode=cfg.mode,
            reinit="finish_previous",
            id=run_id,
            resume="allow" if run_id else None,
        )

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Stores the resolved config (and derived quantities) as the run config."""
        self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """`wandb.log(metrics, step=step)`."""
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Finishes the run."""
        if self.run is not None:
            self.run.finish()
            self.run = None
