"""The supervisor: torchrun's elastic agent runs and restarts the ranks; this loop watches and records.

Design note: restarts belong to torchrun (`--max-restarts`): when a rank dies, its agent stops the group and
starts it again, and `train.py` autoresumes from the latest checkpoint (same command, same `run_name`). This
process only (1) watches the ranks' heartbeat files, (2) on a hang dumps every rank's stacks (SIGUSR2 ->
faulthandler) and SIGKILLs the ranks so torchrun restarts the group, and (3) writes `events.jsonl`: start,
failures (rank, cause), restarts, the resumed step and the time lost, and a summary line at the end.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from foundry.callbacks.heartbeat import Beat, read_beats
from foundry.launch.events import append_event
from foundry.launch.watchdog import Progress
from foundry.launch.worker import STACK_SIGNAL, stacks_path

__all__ = ["Supervisor", "alive"]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class _Attempt:
    """Bookkeeping for the restart the supervisor is waiting to see make its first step."""

    attempt: int
    failed_at: float
    last_progress: float
    last_step: int
    resumed_step: int | None = None


@dataclass
class Supervisor:
    """Watches one torchrun process (`proc`) whose ranks beat into `<run_dir>/heartbeat`."""

    run_dir: Path
    launch_id: str
    progress: Progress
    poll_s: float = 0.05
    dump_wait_s: float = 2.0
    failed: set[int] = field(default_factory=set)
    """Attempts whose failure is already recorded."""
    pending: _Attempt | None = None
    failures: int = 0
    time_lost_s: float = 0.0
    final_step: int = 0

    def watch(self, proc: subprocess.Popen) -> int:
        """Polls until torchrun exits; returns its exit code."""
        previous = {
            s: signal.signal(s, _forward(proc)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
        }
        try:
            while proc.poll() is None:
                self.tick(read_beats(self.run_dir / "heartbeat"), time.time())
                time.sleep(self.poll_s)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        self.tick(read_beats(self.run_dir / "heartbeat"), time.time())
        return int(proc.returncode)

    def tick(self, beats: dict[int, Beat], now: float) -> None:
        """One look at the heartbeats: new attempts, dead ranks, resume progress, hangs."""
        if not beats:
            return
        attempt = max(b.attempt for b in beats.values())
        if attempt > self.progress.attempt:
            self._new_attempt(attempt, now)
        current = {r: b for r, b in beats.items() if b.attempt == attempt}
        self.final_step = max([self.final_step, *(b.step for b in current.values())])
        self.progress.observe(current, now)
        self._check_resumed(current, now)
        done = bool(current) and all(b.phase == "done" for b in current.values())
        if attempt not in self.failed:
            dead = sorted(r for r, b in current.items() if b.phase != "done" and not alive(b.pid))
            if dead:
                b = current[dead[0]]  # several dead at the first look: torchrun already stopped the others
                self._failure(attempt, now, cause="exited", rank=b.rank, pid=b.pid, step=b.step, ranks=dead)
            elif self.progress.hung(now, done=done):
                self._hang(attempt, current, now)

    def _failure(
        self, attempt: int, now: float, *, cause: str, rank: int, pid: int, step: int, **extra: object
    ) -> None:
        self.failed.add(attempt)
        self.failures += 1
        last_step = max(self.progress.steps.values(), default=step)
        self.pending = _Attempt(attempt + 1, now, self.progress.last_change, last_step)
        append_event(
            self.run_dir, "failure", cause=cause, rank=rank, pid=pid, step=step, attempt=attempt, **extra
        )

    def _hang(self, attempt: int, beats: dict[int, Beat], now: float) -> None:
        """Dumps every rank's stacks (SIGUSR2, then SIGCONT for a stopped rank), then SIGKILLs the ranks."""
        for b in beats.values():
            _signal(b.pid, STACK_SIGNAL)
            _signal(b.pid, signal.SIGCONT)
        time.sleep(self.dump_wait_s)
        dumps = [str(stacks_path(self.run_dir, self.launch_id, attempt, r)) for r in sorted(beats)]
        stalled = round(now - self.progress.last_change, 3)
        append_event(
            self.run_dir, "stacks", attempt=attempt, paths=dumps, stalled_s=stalled,
            deadline_s=round(self.progress.deadline(), 3),
        )  # fmt: skip
        lowest = min(beats.values(), key=lambda b: b.step)
        self._failure(
            attempt, now, cause="hang", rank=lowest.rank, pid=lowest.pid, step=lowest.step, stalled_s=stalled
        )
        for b in beats.values():
            _signal(b.pid, signal.SIGKILL)

    def _new_attempt(self, attempt: int, now: float) -> None:
        if self.progress.attempt >= 0:
            if self.progress.attempt not in self.failed:  # torchrun restarted before we saw a rank die
                self._failure(
                    self.progress.attempt, now, cause="exited", rank=-1, pid=-1, step=self.final_step
                )
            append_event(self.run_dir, "restart", attempt=attempt)
        self.progress.new_attempt(attempt)

    def _check_resumed(self, beats: dict[int, Beat], now: float) -> None:
        p = self.pending
        if p is None or p.attempt != self.progress.attempt or not beats:
            return
        if p.resumed_step is None and any(b.phase in ("fit", "step") for b in beats.values()):
            fit = [b.step for b in beats.values() if b.phase == "fit"]
            p.resumed_step = min(fit) if fit else min(b.step for b in beats.values()) - 1
        if p.resumed_step is not None and any(b.step > p.resumed_step for b in beats.values()):
            steps_lost = max(p.last_step - p.resumed_step, 0)
            median = statistics.median(self.progress.step_seconds) if self.progress.step_seconds else 0.0
            lost = now - p.last_progress + steps_lost * median
            self.time_lost_s += lost
            append_event(
                self.run_dir, "resumed", attempt=p.attempt, resumed_step=p.resumed_step, steps_lost=steps_lost,
                restart_to_first_step_s=round(now - p.failed_at, 3), time_lost_s=round(lost, 3),
            )  # fmt: skip
            self.pending = None


def _forward(proc: subprocess.Popen):  # noqa: ANN202 - a signal handler
    def handler(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(signum)

    return handler
