"""`train.log` held back until the run is accepted: a refused command never appends to a run's log.

Design note: Hydra opens the job's log file (`<run_dir>/train.log`) before the task starts, so a command that
is then refused (a bad value, missing data, a checkpoint it cannot resume) would leave lines in the log of the
run it names. `conf/hydra/default.yaml` therefore makes the file handler a `DeferredFileHandler`: it keeps the
records in memory (a few dozen lines: the data build) and opens the file only when `release_run_logs` says
the run was accepted (`foundry.rundir.record`), or drops them on `discard_run_logs`. Hydra attaches it to
the root logger, which is where these functions look.
"""

from __future__ import annotations

import logging

__all__ = ["DeferredFileHandler", "discard_run_logs", "release_run_logs"]


class DeferredFileHandler(logging.FileHandler):
    """A `logging.FileHandler` that buffers records until `write_held()` and never creates the file before.

    Args:
        filename: The log file (`<run_dir>/train.log`).
        mode: File mode (append by default, as Hydra's handler).
        encoding: Text encoding.
    """

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode=mode, encoding=encoding, delay=True)
        self._pending: list[logging.LogRecord] | None = []
        self._dropped = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._dropped:
            return
        if self._pending is not None:
            self._pending.append(record)
            return
        super().emit(record)

    def write_held(self) -> None:
        """Writes the held records to the file, then writes through. (Not `release`: that is the lock's.)"""
        pending, self._pending = self._pending or [], None
        for record in pending:
            super().emit(record)

    def drop_held(self) -> None:
        """Drops the held records and every later one (the run was refused: its file stays as it was)."""
        self._pending, self._dropped = None, True


def _deferred() -> list[DeferredFileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, DeferredFileHandler)]


def release_run_logs() -> None:
    """The run was accepted: every `DeferredFileHandler` on the root logger writes its records."""
    for handler in _deferred():
        handler.write_held()


def discard_run_logs() -> None:
    """The run was refused: every `DeferredFileHandler` on the root logger drops its records."""
    for handler in _deferred():
        handler.drop_held()
