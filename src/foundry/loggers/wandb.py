"""Weights & Biases logger (optional dependency `wandb`, imported only when `logger=wandb`).

Design note: W&B is just another `Logger`; offline mode (`WANDB_MODE=offline` or `logger.wandb.mode`)
writes `<run_dir>/wandb/offline-run-*` for a later `wandb sync`, so it works with no network or login.
The W&B run name is the run's `run_name` and the resolved config is its `config`. Everything W&B records is
redacted first (`streaming.storage.redact`): the config, the tags and group, and the command line W&B copies
from `sys.argv` into the run's metadata (swapped for a redacted copy only while `wandb.init` reads it).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from foundry.loggers.base import WandbConfig
from streaming.storage.redact import redact_text, redact_value

if TYPE_CHECKING:
    from wandb import Run

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
        mode = cast("Literal['online', 'offline', 'disabled'] | None", cfg.mode)  # WandbConfig checks it
        with _redacted_argv():
            self.run: Run | None = wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                group=redact_text(cfg.group) if cfg.group else None,
                tags=[redact_text(t) for t in cfg.tags] or None,
                name=run_name,
                dir=str(run_dir),
                mode=mode,
                reinit="finish_previous",
                id=run_id,
                resume="allow" if run_id else None,
            )

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Stores the resolved config (and derived quantities), credentials masked, as the run config."""
        assert self.run is not None, "the W&B run is closed"
        self.run.config.update(redact_value(params), allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """`wandb.log(metrics, step=step)`."""
        assert self.run is not None, "the W&B run is closed"
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Finishes the run."""
        if self.run is not None:
            self.run.finish()
            self.run = None


@contextmanager
def _redacted_argv() -> Iterator[None]:
    """`sys.argv` with its secrets masked for the duration of the block (W&B records the command line).

    W&B reads the arguments from `sys.argv` itself, with no setting to pass them; the original list is put
    back on exit, also when `wandb.init` raises.
    """
    original = sys.argv
    sys.argv = [redact_text(arg) for arg in original]
    try:
        yield
    finally:
        sys.argv = original
