"""The tasks `train.py task=...` runs, and `run_task`, the dispatcher between Hydra and them.

Design note: this package is the wiring, the one place that imports every component (models, data, optim,
train, checkpoint, parallel, eval, loggers, callbacks, streaming) and passes each its slice of the config;
no component imports it back. One module per task: `pretrain` (plan -> build -> `Trainer.fit`), `finetune`
(the same run on prompt/response or chat rows) and `evaluate` (`task=eval`, ICL evaluation of a model);
`plan` holds the pure arithmetic a run derives from its config, `summary` the Hydra callback tabulating a
sweep, `run_files` the atomic writer for a run directory's files, `run_record` the moment a run is accepted.
Nothing is written into the run directory before the task accepts the run (`RunRecord.open`, after the config,
the data and the checkpoint it resumes were checked), so a refused command leaves an existing run directory as
it was and a new one not at all; only rank 0 (asked of the world, `process_world`) writes the run's files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from foundry.config import TrainConfig, check_group_choices, to_train_config
from foundry.env_refs import env_refs, record_container
from foundry.eval.data import check_task_data
from foundry.hydra_callbacks import redacted_yaml, write_hydra_files
from foundry.loggers import attach_final_metrics
from foundry.parallel.dist import process_world
from foundry.run_name import run_name_given
from foundry.rundir import layout
from foundry.rundir.files import write_text_atomic
from foundry.rundir.lock import RunLock
from foundry.rundir.record import RunRecord
from foundry.storage import apply_storage
from foundry.tasks.evaluate import eval_task
from foundry.tasks.finetune import finetune
from foundry.tasks.pretrain import pretrain

__all__ = ["TASK_RUNNERS", "eval_task", "finetune", "pretrain", "run_task", "write_text_atomic"]

TASK_RUNNERS: dict[str, Callable[[TrainConfig, Path, RunRecord], dict[str, float]]] = {
    "pretrain": lambda cfg, run_dir, record: pretrain(cfg, run_dir=run_dir, record=record),
    "finetune": lambda cfg, run_dir, record: finetune(cfg, run_dir=run_dir, record=record),
    "eval": lambda cfg, run_dir, record: eval_task(cfg, run_dir, record=record),
}
"""`cfg.task` -> the function running it (one per name in `foundry.config.TASKS`)."""
OBJECTIVES = ("eval/loss", "train/loss")
"""Final metrics a sweeper minimises, in order of preference."""


def _run_dir() -> Path:
    """Hydra's output directory for this job (`outputs/<run_name>`), or `outputs/dev` outside Hydra."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(layout.OUTPUTS) / "dev"


def _record(cfg: DictConfig, run_dir: Path, *, main: bool) -> RunRecord:
    """The job's `RunRecord`: on `open()` rank 0 writes `config.yaml` and, under Hydra, `.hydra/rank<R>/`."""

    def write_files() -> None:
        # ${oc.env:} interpolations kept as written
        write_text_atomic(run_dir / layout.CONFIG, redacted_yaml(record_container(cfg)))
        if HydraConfig.initialized():
            write_hydra_files(layout.RunDir(run_dir).hydra(process_world().rank), cfg)

    named = run_name_given(HydraConfig.get().overrides.task) if HydraConfig.initialized() else True
    return RunRecord(run_dir, named=named, is_main=main, write_files=write_files, env_refs=env_refs(cfg))


def run_task(cfg: DictConfig) -> float | None:
    """Runs the task `cfg.task` selects and returns the sweep objective.

    Validates `cfg` (`to_train_config`) before writing anything; the task opens the run (`RunRecord.open`:
    the resolved config, credentials masked, to `<run_dir>/config.yaml`, and `train.log`) once it accepts it,
    and a command refused before that (a `ConfigError`, missing data, a checkpoint it cannot resume) leaves
    the run directory as it was (a new one is removed). The final metrics go to `final_metrics.json`, each
    file written atomically and on rank 0 only.

    Returns:
        The final `eval/loss` (else `train/loss`), the value Hydra sweepers (Optuna) minimise.
    """
    run_dir = _run_dir()
    # before the process group exists: the launcher's environment says
    main = process_world().rank == 0
    record = _record(cfg, run_dir, main=main)
    lock: RunLock | None = None
    try:
        # experiment=typo: Hydra skips a missing option of an optional group silently
        check_group_choices()
        train_cfg = to_train_config(cfg)
        # one process per run: a second command on this run is refused here, naming the holder
        if main:
            lock = RunLock(run_dir, run_name=train_cfg.run_name)
            lock.acquire()
        # before anything opens a URL: data, checkpoints, workers
        apply_storage(train_cfg.storage)
        if train_cfg.task == "eval" and train_cfg.eval is not None:
            # no data for any task: refused before anything is written
            check_task_data(train_cfg.eval)
        run_dir.mkdir(parents=True, exist_ok=True)
        metrics = TASK_RUNNERS[train_cfg.task](train_cfg, run_dir, record)
    except BaseException:
        # refused (or crashed) before the run was accepted: nothing of it stays
        record.refuse(lock_held=lock is not None and lock.held)
        if lock is not None:
            lock.release()
        raise
    try:
        if main:
            write_text_atomic(run_dir / layout.FINAL_METRICS, json.dumps(metrics, indent=2))
            # the training run's closed loggers may take the file too (MLflow)
            if train_cfg.task != "eval":
                attach_final_metrics(train_cfg.logger, run_dir)
    finally:
        if lock is not None:
            lock.release()
    for key in OBJECTIVES:
        if key in metrics and math.isfinite(metrics[key]):
            return float(metrics[key])
    return None
