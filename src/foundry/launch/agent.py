"""The supervisor: torchrun's elastic agent runs and restarts the ranks; this loop watches, records and stops.

Design note: restarts belong to torchrun (`--max-restarts`): when a rank dies, its agent stops the group and
starts it again, and `train.py` autoresumes from the latest checkpoint (same command, same `run_name`). This
process (1) watches the ranks' heartbeat files; (2) on a hang, or an attempt that never reaches fit within
the start-up timeout, freezes every rank (SIGSTOP), has each dump its Python stacks (SIGUSR2 -> faulthandler,
delivered on SIGCONT), then SIGKILLs them so torchrun restarts the group; (3) reads the ranks' exit notes
(`foundry.launch.worker`): a fatal exit (config error, failed health check) or a preemption exit (75) stops
torchrun (SIGHUP: its agent then stops the ranks) before it can restart anything, and the launcher exits with
that code; (4) turns SIGTERM/SIGUSR1 to itself into the same signal to the ranks that are stepping (they
checkpoint at the next step boundary and exit 75), never to torchrun, which would tear them down within 30 s;
(5) writes `events.jsonl`: start, failures (rank, cause), stacks, restarts, the resumed step and the time
lost, fatal, preempted, and the summary line (`foundry.launch.cli`).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from foundry.callbacks.heartbeat import Beat, read_beats
from foundry.events import append_event
from foundry.launch.watchdog import STARTUP_PHASES, Progress, stuck_phase
from foundry.launch.worker import STACK_SIGNAL, ExitNote, read_exit_notes, stacks_path
from foundry.rundir.layout import RunDir
from foundry.train.preemption import PREEMPTION_SIGNALS, REQUEUE_EXIT_CODE
from stackbase.process import pid_alive

__all__ = ["STOP_SIGNAL", "Supervisor"]

STOP_SIGNAL = signal.SIGHUP
"""What the launcher sends torchrun to stop the group for good (torchrun passes it on to the ranks)."""
TORCHRUN_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
"""`TORCHELASTIC_SIGNALS_TO_HANDLE` for torchrun: not SIGTERM (ignored there, handled by the ranks)."""
KILL_AFTER_S = 60.0


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
class _Preemption:
    """A preemption signal the launcher received (forwarded to the stepping ranks once)."""

    signal_name: str
    received_at: float
    forwarded: bool = False


@dataclass
class Supervisor:
    """Watches one torchrun process (`proc`) whose ranks beat into `<run_dir>/heartbeat`."""

    run_dir: Path
    launch_id: str
    progress: Progress
    poll_s: float = 0.05
    dump_wait_s: float = 5.0
    failed: set[int] = field(default_factory=set)
    """Attempts whose failure is already recorded."""
    pending: _Attempt | None = None
    failures: int = 0
    time_lost_s: float = 0.0
    final_step: int = 0
    exit_code: int | None = None
    """The launcher's own verdict (a fatal code, 75), which replaces torchrun's exit code."""
    stop_cause: str | None = None
    preemption: _Preemption | None = None
    proc: subprocess.Popen | None = None
    stop_sent_at: float | None = None
    health_defer_s: float = 0.0
    max_restarts: int | None = None
    """torchrun's restart limit, for the console lines (`restart 1/3`)."""
    """Under `--nnodes=MIN:MAX` a failed node-local check (devices, disk, store) is first left to the node
    guard (`foundry.launch.nodes`: the node leaves the elastic job, exit 4; the cli sets this then): the held
    ranks cannot be restarted meanwhile, and the launcher stops the group itself (`fatal`, exit 3) only if it
    still runs after this many seconds."""
    _notes_seen: dict[tuple[int, int], float] = field(default_factory=dict)

    def start(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Starts torchrun (`cmd`) with the preemption signals ignored (its worker entry restores them)."""
        # a previous launch's notes
        for stale in self.heartbeats.glob("exit-rank*.json"):
            stale.unlink()
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in PREEMPTION_SIGNALS}
        # SIG_IGN is inherited across exec; torchrun installs no handler of its own for these two
        try:
            self.proc = subprocess.Popen(cmd, env={**env, "TORCHELASTIC_SIGNALS_TO_HANDLE": TORCHRUN_SIGNALS})
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return self.proc

    @property
    def heartbeats(self) -> Path:
        return RunDir(self.run_dir).heartbeat

    def watch(self, proc: subprocess.Popen) -> int:
        """Polls until torchrun exits; returns the launcher's verdict or else torchrun's exit code.

        While watching, SIGTERM/SIGUSR1 to the launcher mean preemption and SIGINT is passed to torchrun.
        """
        self.proc = proc
        previous = {s: signal.signal(s, self._on_preemption_signal) for s in PREEMPTION_SIGNALS}
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _forward(proc))
        try:
            while proc.poll() is None:
                now = time.time()
                self.tick(read_beats(self.heartbeats), now)
                if self.stop_sent_at is not None and now - self.stop_sent_at > KILL_AFTER_S:
                    # torchrun did not stop its ranks in time
                    proc.kill()
                time.sleep(self.poll_s)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        self.tick(read_beats(self.heartbeats), time.time())
        return int(proc.returncode) if self.exit_code is None else self.exit_code

    def tick(self, beats: dict[int, Beat], now: float) -> None:
        """One look at the heartbeats: new attempts, exit notes, dead ranks, resume progress, hangs."""
        if self.exit_code is not None:
            return
        if not beats:
            # nothing started yet: nothing to checkpoint
            if self.preemption is not None:
                self._preempted(now, step=None, checkpoint=False)
            return
        attempt = max(b.attempt for b in beats.values())
        if attempt > self.progress.attempt:
            self._new_attempt(attempt, now)
        current = {r: b for r, b in beats.items() if b.attempt == attempt}
        self.final_step = max([self.final_step, *(b.step for b in current.values())])
        self.progress.observe(current, now)
        self._check_resumed(current, now)
        notes = {r: n for r, n in read_exit_notes(self.heartbeats).items() if n.attempt == attempt}
        if self._act_on_notes(current, notes, now) or self._act_on_preemption(current, now):
            return
        done = bool(current) and all(b.phase == "done" for b in current.values())
        if attempt in self.failed:
            return
        dead = sorted(r for r, b in current.items() if b.phase != "done" and not pid_alive(b.pid))
        # several dead at the first look: the one that did not fail because a peer died is blamed
        if dead:
            blamed = [r for r in dead if getattr(notes.get(r), "kind", "") != "peer"] or dead
            b = current[blamed[0]]
            self._failure(attempt, now, cause="exited", rank=b.rank, pid=b.pid, step=b.step, ranks=dead)
        elif self.progress.hung(now, done=done):
            p = self.progress
            self._dump_and_kill(
                attempt, current, now, since=p.last_change, deadline=p.deadline(), cause="hang"
            )
        elif self.progress.stuck_starting(now, done=done):
            phase = stuck_phase([b.phase for b in current.values() if b.phase in STARTUP_PHASES])
            self._dump_and_kill(
                attempt, current, now, since=self.progress.started_at, deadline=self.progress.startup,
                cause="startup", phase=phase, stuck_in=STARTUP_PHASES.get(phase, phase),
            )  # fmt: skip

    # ---------------------------------------------------------------- stopping for good
    def _stop(self, code: int, cause: str, now: float) -> None:
        """Stops torchrun (and with it the ranks) for good; the launcher will exit with `code`."""
        self.exit_code, self.stop_cause, self.stop_sent_at = code, cause, now
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(STOP_SIGNAL)

    def _act_on_notes(self, beats: dict[int, Beat], notes: dict[int, ExitNote], now: float) -> bool:
        for n in notes.values():
            self._notes_seen.setdefault((n.attempt, n.rank), now)
        fatal = sorted(
            (n for n in notes.values() if n.kind == "fatal" and self._due(n, now)), key=lambda n: n.rank
        )
        if fatal:
            n = fatal[0]
            append_event(
                self.run_dir, "fatal", cause=n.cause, exit_code=n.code, rank=n.rank, attempt=n.attempt,
                ranks=[f.rank for f in fatal], detail=n.detail, step=n.step, check=n.check,
            )  # fmt: skip
            self._stop(n.code, "fatal", now)
            return True
        preempted = [n for n in notes.values() if n.kind == "preempted"]
        if preempted and all(r in notes or not pid_alive(b.pid) for r, b in beats.items()):
            self._preempted(now, step=max(n.step for n in preempted), checkpoint=True)
            return True
        return False

    def _due(self, note: ExitNote, now: float) -> bool:
        if note.cause != "health" or note.check == "all_reduce":
            return True
        return now - self._notes_seen[(note.attempt, note.rank)] >= self.health_defer_s

    def _on_preemption_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.preemption is None:
            self.preemption = _Preemption(signal.Signals(signum).name, time.time())

    def _act_on_preemption(self, beats: dict[int, Beat], now: float) -> bool:
        """Forwards a preemption signal to the ranks once one is stepping (handlers installed)."""
        p = self.preemption
        if p is None:
            return False
        # not training: nothing to save
        if not any(b.phase in ("fit", "step") for b in beats.values()):
            self._preempted(now, step=self.final_step, checkpoint=False)
            return True
        if any(b.phase != "done" and not pid_alive(b.pid) for b in beats.values()):
            # a rank died instead of saving
            self._preempted(now, step=self.final_step, checkpoint=False)
            return True
        stepping = [b for b in beats.values() if b.phase == "step"]
        # the others learn it at the step's all-reduce
        if not p.forwarded and stepping:
            for b in stepping:
                _signal(b.pid, signal.Signals[p.signal_name])
            p.forwarded = True
        # while stopping, dead ranks and stalls are not failures
        return True

    def _preempted(self, now: float, *, step: int | None, checkpoint: bool) -> None:
        p = self.preemption
        append_event(
            self.run_dir, "preempted", step=step, checkpoint=checkpoint, exit_code=REQUEUE_EXIT_CODE,
            signal=p.signal_name if p else None, by="launcher" if p else "ranks",
            seconds=round(now - p.received_at, 3) if p else None, attempt=self.progress.attempt,
        )  # fmt: skip
        self._stop(REQUEUE_EXIT_CODE, "preempted", now)

    # ---------------------------------------------------------------- failures and restarts
    def _failure(
        self, attempt: int, now: float, *, cause: str, rank: int, pid: int, step: int, **extra: object
    ) -> None:
        self.failed.add(attempt)
        self.failures += 1
        last_step = max(self.progress.steps.values(), default=step)
        p = self.progress
        self.pending = _Attempt(attempt + 1, now, p.last_change if p.armed else p.started_at, last_step)
        append_event(
            self.run_dir, "failure", cause=cause, rank=rank, pid=pid, step=step, attempt=attempt, **extra
        )
        who = f"rank {rank}" if rank >= 0 else "a rank"
        how = f" with {extra['signal']}" if extra.get("signal") else ""
        _say(f"{who} {cause}{how} at step {step} (attempt {attempt})")

    def _dump_and_kill(
        self,
        attempt: int,
        beats: dict[int, Beat],
        now: float,
        *,
        since: float,
        deadline: float,
        **failure: object,
    ) -> None:
        """Freezes every rank, has each dump its stacks, records where, then SIGKILLs them
        (torchrun restarts).

        The ranks are stopped first so that a rank that was itself stopped (SIGSTOP) does not, once continued
        to handle SIGUSR2, finish the step the others waited for and run on while the dumps are written.
        `since` is when the attempt last progressed (a hang) or started (start-up); `deadline` the limit.
        """
        for b in beats.values():
            _signal(b.pid, signal.SIGSTOP)
        for b in beats.values():
            # pending until SIGCONT, then handled before any Python code runs
            _signal(b.pid, STACK_SIGNAL)
            _signal(b.pid, signal.SIGCONT)
        dumps = [stacks_path(self.run_dir, self.launch_id, attempt, r) for r in sorted(beats)]
        wait_until = time.monotonic() + self.dump_wait_s
        while time.monotonic() < wait_until and not all(_written(p) for p in dumps):
            time.sleep(0.02)
        # the last frames of a dump
        time.sleep(0.05)
        for b in beats.values():
            _signal(b.pid, signal.SIGKILL)
        stalled = round(now - since, 3)
        append_event(
            self.run_dir, "stacks", attempt=attempt, paths=[str(p) for p in dumps], stalled_s=stalled,
            deadline_s=round(deadline, 3),
        )  # fmt: skip
        low = min(beats.values(), key=lambda b: b.step)
        self._failure(attempt, now, rank=low.rank, pid=low.pid, step=low.step, stalled_s=stalled, **failure)  # type: ignore[arg-type]

    def _new_attempt(self, attempt: int, now: float) -> None:
        """A `failure` for each earlier attempt not yet recorded and a `restart` for each attempt after the
        first.

        An attempt whose ranks died before their first beat (an import error, a crash in start-up) is never
        seen: torchrun's restart count jumps, and the attempts in between are recorded here.
        """
        seen = self.progress.attempt
        for missed in range(max(seen, 0), attempt):
            # torchrun restarted before we saw a rank die (or saw it at all)
            if missed not in self.failed:
                step = self.final_step
                self._failure(missed, now, cause="exited", rank=-1, pid=-1, step=step, seen=missed == seen)
        for a in range(max(seen + 1, 1), attempt + 1):
            append_event(self.run_dir, "restart", attempt=a)
            limit = f"/{self.max_restarts}" if self.max_restarts is not None else ""
            _say(f"restart {a}{limit}: the ranks resume from the latest checkpoint")
        self.progress.new_attempt(attempt, now)

    def _check_resumed(self, beats: dict[int, Beat], now: float) -> None:
        """Records `resumed` once the restarted attempt steps past its resumed step (or finishes there)."""
        p = self.pending
        if p is None or p.attempt != self.progress.attempt or not beats:
            return
        if p.resumed_step is None and any(b.phase in ("fit", "step", "done") for b in beats.values()):
            fit = [b.step for b in beats.values() if b.phase == "fit"]
            stepped = [b.step for b in beats.values() if b.phase == "step"]
            p.resumed_step = min(fit) if fit else (min(stepped) - 1 if stepped else self.final_step)
        if p.resumed_step is None:
            return
        finished = all(b.phase == "done" for b in beats.values())
        if finished or any(b.step > p.resumed_step for b in beats.values()):
            steps_lost = max(p.last_step - p.resumed_step, 0)
            median = statistics.median(self.progress.step_seconds) if self.progress.step_seconds else 0.0
            lost = now - p.last_progress + steps_lost * median
            self.time_lost_s += lost
            append_event(
                self.run_dir, "resumed", attempt=p.attempt, resumed_step=p.resumed_step,
                steps_lost=steps_lost, restart_to_first_step_s=round(now - p.failed_at, 3),
                time_lost_s=round(lost, 3),
            )  # fmt: skip
            _say(
                f"restart {p.attempt} resumed at step {p.resumed_step}: "
                f"{steps_lost} step(s) and {lost:.1f} s lost"
            )
            self.pending = None


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _forward(proc: subprocess.Popen):
    def handler(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(signum)

    return handler


def _say(line: str) -> None:
    """One console line for the user watching the launch (the event log holds the details)."""
    print(f"[foundry.launch] {line}", file=sys.stderr, flush=True)
