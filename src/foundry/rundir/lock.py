"""One process per run: rank 0 holds an exclusive lock on `<run_dir>/.lock` while the run runs (issue 39: two
`train.py run_name=x` at once both trained into one folder, and one died mid-run on the other's
`manifest.json.tmp`).

Design note: the lock is `fcntl.flock` on the file, taken without waiting: the kernel releases it when the
holding process exits however it exits (kill -9 included), so a crashed run never leaves a stale lock and the
launcher's restart takes it again at once. The file holds the holder's pid, host and start time (written after
the lock is taken) so a refused command can say who holds it. Only global rank 0 takes it: the other ranks of
the same launch are that run. It is released by `release()` at the end of the task or by the process's exit;
the file stays (an empty folder of a refused new run is removed with it, `RunRecord.refuse`). Nothing waits on
the lock, so nothing can deadlock on it. On file systems without `flock` (some network mounts) taking it fails
with `OSError`, and the run goes on unlocked with a warning.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from foundry.errors import ConfigError
from foundry.rundir.layout import LOCK

__all__ = ["RunLock", "lock_held"]


class RunLock:
    """The run directory's lock, held by this process from `acquire()` to `release()` (or its exit)."""

    def __init__(self, run_dir: Path, *, run_name: str) -> None:
        self.path = Path(run_dir) / LOCK
        self.run_name = run_name
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock at once or refuses.

        Raises:
            ConfigError: Another process holds it (the message names its pid, host and start).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise ConfigError(
                f"run {self.run_name!r} is already running ({holder}; {self.path}): wait for it to finish, "
                f"stop it (python -m foundry.runs stop {self.run_name}), or choose another run_name"
            ) from None
        except OSError as err:
            # no flock on this file system
            os.close(fd)
            print(
                f"[foundry] warning: cannot lock {self.path} ({err}); the run goes on unlocked",
                file=sys.stderr,
            )
            return
        os.ftruncate(fd, 0)
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        os.write(
            fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}).encode()
        )
        self._fd = fd

    def release(self) -> None:
        """Releases the lock (idempotent)."""
        if self._fd is not None:
            # closing the descriptor drops the flock
            os.close(self._fd)
            self._fd = None


def _describe(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(info['pid'])} on {str(info['host'])[:64]} since {str(info['started'])[:32]}"
    except (OSError, ValueError, KeyError, TypeError):
        return "by another process"


def lock_held(run_dir: str | Path) -> bool | None:
    """Whether a process holds the run's lock now (`runs list` tells a run still starting from one killed
    before its first step), read from `/proc/locks` without touching the lock (taking it, even for an instant,
    could refuse a run starting at that moment). None where that cannot be told: no lock file (a run of an
    older version, a bucket) or no `/proc/locks`."""
    try:
        st = os.stat(Path(run_dir) / LOCK)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == ident:
            return True
    return False
