"""Checkpointing wired into a training run: autoresume/`load_path` before the first step, saves after steps.

Design note: the trainer knows nothing of checkpoints; `CheckpointCallback` saves from `on_step_end` and
waits for the last upload in `on_fit_end`. `find_start` picks the checkpoint a run starts from (the task
loads it with `foundry.checkpoint.resume.load_into`, checks first), and `attach_checkpointing` adds the
saving callback, so the whole feature is one callback plus a few calls in `foundry.tasks.pretrain`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import TYPE_CHECKING

from foundry.callbacks.base import Callback
from foundry.checkpoint.config import CheckpointConfig
from foundry.checkpoint.resume import LoadPathAdapter, StartPoint, resolve_start
from foundry.checkpoint.saver import Checkpointer, resolve_format
from foundry.rundir import layout

if TYPE_CHECKING:
    from foundry.models import ModelConfig
    from foundry.train.loop import Trainer

__all__ = ["CheckpointCallback", "attach_checkpointing", "find_start"]


class CheckpointCallback(Callback):
    """Saves through `checkpointer` at its interval and at the last step; waits for uploads at the end."""

    def __init__(self, checkpointer: Checkpointer, *, fmt: str) -> None:
        self.checkpointer = checkpointer
        self.fmt = fmt

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        ckpt = self.checkpointer
        ckpt.poll()
        step = trainer.state.step
        # preempted: save now and wait for the upload
        stop = getattr(trainer, "stop_requested", False)
        # the spike guard rolled back past a save: this step is new
        if ckpt.last_saved_step >= step:
            ckpt.last_saved_step = -1
        if not ckpt.should_save(step, final=step >= trainer.max_steps or stop):
            if stop:
                ckpt.wait()
            return {}
        ckpt.save(trainer, fmt=self.fmt)
        if stop:
            ckpt.wait()
        return {"checkpoint/blocked_seconds": ckpt.last_blocked}

    def on_fit_end(self, trainer: Trainer) -> None:
        self.checkpointer.close()


def attach_checkpointing(
    trainer: Trainer,
    cfg: CheckpointConfig,
    *,
    run_name: str,
    run_dir: str,
    save_every_steps: int,
    model_config: ModelConfig,
    global_batch_size: int,
    wandb_run_id: str | None = None,
) -> None:
    """When `save_folder` is set, adds the callback that saves `trainer` (already loaded from its start)."""
    if not cfg.save_folder:
        return
    checkpointer = Checkpointer(
        cfg,
        run_name=run_name,
        run_dir=run_dir,
        every_steps=save_every_steps,
        model_config=asdict(model_config),
        extra={"global_train_batch_size": global_batch_size, "wandb_run_id": wandb_run_id},
    )
    checkpointer.last_saved_step = trainer.state.step
    trainer.callbacks.append(
        CheckpointCallback(checkpointer, fmt=resolve_format(cfg.save_format, trainer.model))
    )


def find_start(
    cfg: CheckpointConfig,
    *,
    run_name: str,
    run_dir: str | os.PathLike[str],
    adapt_load_path: LoadPathAdapter | None = None,
) -> StartPoint | None:
    """The checkpoint this run starts from (autoresume first, then `load_path`), or None."""
    if not (cfg.save_folder or cfg.load_path):
        return None
    scratch = os.path.join(run_dir, layout.CHECKPOINT_SCRATCH)
    return resolve_start(cfg, run_name=run_name, scratch=scratch, adapt_load_path=adapt_load_path)
