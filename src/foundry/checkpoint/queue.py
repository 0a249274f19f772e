"""`UploadQueue`: checkpoints leave in the background, one at a time, and only the newest waits.

Design note (the protocol): the training thread calls `submit(job)`, which never waits on the store. One
background thread runs jobs. At most one job is *in flight* (being written, uploaded, published) and at most
one is *waiting*; a job submitted while another waits replaces it, and the replaced one is handed to `drop`
(by the background thread, before it starts the next job) so its staging files are removed and, for a
multi-rank sharded save, the other ranks learn it will never come (see `Checkpointer`). So during a store
outage training goes on, memory holds at most two checkpoints, and when the store comes back the newest state
is published first; nothing already published is touched by a drop.

Locks: one `threading.Condition` guards `_waiting`, `_busy`, `_error` and `_closed`. The background thread
holds it only to take or finish a job, never while running one; the training thread holds it only to swap the
waiting job or to read the error. `wait()` sleeps on the condition until nothing is waiting or in flight (or
a failure is recorded), and every change of those fields notifies, so it cannot sleep through the end. Nothing
here talks to other ranks, so no thread waits on another process while holding the lock: no deadlock.

A failure of a job is kept and re-raised on the training thread by every later `poll()`/`wait()`/`submit()`
(`close()` raises it only if no call has yet); after a failure the queue runs nothing more (the run fails and
its launcher resumes from the last published checkpoint).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["UploadQueue"]

J = TypeVar("J")


class UploadQueue(Generic[J]):
    """Runs `run(job)` for submitted jobs on one background thread, keeping only the newest waiting job.

    Args:
        run: Does one job (write, upload, publish); raises on failure.
        drop: Cleans up after a job that was replaced before it started (called on the background thread).
        name: The thread's name.
    """

    def __init__(
        self, run: Callable[[J], None], drop: Callable[[J], None], *, name: str = "checkpoint"
    ) -> None:
        self._run, self._drop = run, drop
        self._cond = threading.Condition()
        self._waiting: J | None = None
        self._dropped: list[J] = []
        self._busy = False
        self._error: BaseException | None = None
        self._reported = False
        self._closed = False
        self.dropped_count = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- training thread
    def submit(self, job: J) -> J | None:
        """Queues `job` behind the one in flight; returns the waiting job it replaced (already dropped),
        if any."""
        with self._cond:
            self._raise()
            replaced, self._waiting = self._waiting, job
            if replaced is not None:
                self._dropped.append(replaced)
                self.dropped_count += 1
            self._cond.notify_all()
            return replaced

    @property
    def idle(self) -> bool:
        """True when nothing is in flight or waiting."""
        with self._cond:
            return not self._busy and self._waiting is None and not self._dropped

    def poll(self) -> None:
        """Re-raises a background failure (cheap; call once a step)."""
        with self._cond:
            self._raise()

    def wait(self) -> None:
        """Blocks until every submitted job is done (published or dropped); re-raises a failure."""
        with self._cond:
            while self._error is None and (self._busy or self._waiting is not None or self._dropped):
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Waits for the queue to drain, then stops the thread (re-raises a failure not yet raised)."""
        try:
            with self._cond:
                reported = self._reported
            if not reported:
                self.wait()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            self._reported = True
            raise self._error

    # ----------------------------------------------------------------- background thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._waiting is None and not self._dropped:
                    self._cond.wait()
                if self._closed:
                    return
                dropped, self._dropped = self._dropped, []
                job, self._waiting = self._waiting, None
                self._busy = True
            try:
                for old in dropped:
                    self._drop(old)
                if job is not None:
                    self._run(job)
            except BaseException as e:
                # handed to the training thread
                with self._cond:
                    self._error = e
                    self._busy = False
                    self._waiting = None
                    self._cond.notify_all()
                return
            with self._cond:
                self._busy = False
                self._cond.notify_all()
