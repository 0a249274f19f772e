"""`RunRecord`: a run's folder is written only once the command is accepted; a refused one touches nothing.

Design note: a command can be refused late: the data may be missing, or the checkpoint it would resume was
trained on another model or data mixture, which only loading it tells. Until then nothing may change the
run's folder, else an existing run would show the refused command's config (`runs show`) and progress
(`runs list`), and a refused new run would leave a folder `runs list` cannot read. So the task calls
`open()` at the moment the run is accepted (after the data is built and the checkpoint loaded), which has rank
0 write `config.yaml` and `.hydra/rank<R>/` (`write_files`, from `run_task`) and releases `train.log` (held
back by `foundry.run_log.DeferredFileHandler`); `run_task` calls `refuse()` when the task raised before that,
which drops the held log lines and removes the folder if this command created it (it was empty when the task
started: Hydra creates it, and nothing else writes there before `open()`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundry.run_log import discard_run_logs, release_run_logs
from foundry.rundir.layout import LOCK, SCRATCH

__all__ = ["RunRecord"]


@dataclass
class RunRecord:
    """Opens (or refuses) the run at `run_dir` once.

    Args:
        run_dir: The run's folder (Hydra's output directory; it exists).
        named: The user named the run (`run_name=` or `$RUN_NAME`) rather than taking a generated name: only
            a named run may be told to continue with a changed mixture (`foundry.tasks.resume_message`).
        is_main: Rank 0 writes the files; every rank releases its own log.
        write_files: Writes the run's record of its config (`config.yaml`, `.hydra/rank<R>/`) on rank 0.
        env_refs: The config's values that come from the environment (`foundry.env_refs.env_refs`): records
            built from the typed config (`run.json`, logger parameters) keep them as `${oc.env:...}`.
    """

    run_dir: Path
    named: bool = True
    is_main: bool = True
    write_files: Callable[[], None] = lambda: None
    env_refs: dict[str, tuple[Any, str]] = field(default_factory=dict)
    created: bool = field(init=False)
    """The folder was empty when the task started: this command made it (removed again if refused)."""
    state: str = field(init=False, default="pending")

    def __post_init__(self) -> None:
        self.created = not self.run_dir.exists() or not any(self.run_dir.iterdir())

    def open(self) -> None:
        """The run is accepted: writes `config.yaml` and Hydra's files (rank 0) and releases `train.log`.
        Idempotent."""
        if self.state != "pending":
            return
        self.state = "open"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            self.write_files()
        release_run_logs()

    def refuse(self, *, lock_held: bool = False) -> None:
        """The command was refused before `open()`: its log lines are dropped and a folder it created removed
        (with its run lock file, when this command holds the lock)."""
        if self.state != "pending":
            return
        self.state = "refused"
        discard_run_logs()
        if not self.created or not self.run_dir.is_dir():
            return
        for name in SCRATCH:
            shutil.rmtree(self.run_dir / name, ignore_errors=True)
        if lock_held:
            (self.run_dir / LOCK).unlink(missing_ok=True)
        try:
            # only when empty: never removes what another process wrote meanwhile
            self.run_dir.rmdir()
        except OSError:
            pass
