"""Preemption: SIGTERM/SIGUSR1 (and Ctrl-C) make every rank checkpoint at the next step boundary and exit.

Design note: the signal handler only records which signal came and when (no I/O, no collectives, no
allocation of tensors: a handler runs between two bytecodes of whatever the main thread was doing). The
trainer asks `PreemptionWatch.should_stop()` at each step boundary; with several ranks that is a sum
all-reduce of a 0/1 flag, because Slurm, Kubernetes or a spot reclaim may signal only some ranks (or only
the torchrun agent's children at different times), and every rank must stop at the *same* step so that the
checkpoint is one consistent step. The trainer then saves (the checkpoint callback treats a stop like the
final step and waits for the upload) and raises `Preempted`, a `SystemExit` with `REQUEUE_EXIT_CODE` (75,
`EX_TEMPFAIL` from sysexits.h: "temporary failure, retry later"), so `train.py` exits with it after the
usual `finally` clean-up. Slurm requeues on it with `RequeueExit=75` in slurm.conf (or a wrapper script that
runs `scontrol requeue $SLURM_JOB_ID` on 75); a torchrun elastic agent restarts on any non-zero code. A
rerun of the same command (with the same run_name) autoresumes from that checkpoint and continues exactly.

`trainer.preemption_grace` is the time the scheduler allows between its signal and its SIGKILL: the trainer
cannot stretch it, so it reports how long the stop took and warns when that was over the grace (then lower
the step time or the checkpoint size). `0` turns the handling off (signals keep their previous behaviour).
Handlers are installed for the duration of `fit` only, from the main thread only, and the previous ones are
restored afterwards. DataLoader workers must survive the signal too (Slurm signals every process of the
step): torch installs a SIGTERM handler in each worker that exits it, and the rank then fails on its next
batch, so `shield_workers` chains a `worker_init_fn` that ignores the preemption signals (a worker still
exits when its parent does: torch's watchdog checks).

Ctrl-C (SIGINT) is handled the same way (issue 40: it printed a 22-frame `KeyboardInterrupt` traceback and,
with the default save-at-the-end, lost the whole run): the step finishes, the checkpoint is written, the line
that resumes is printed, and the process exits 130 (128 + SIGINT, the shell's code for Ctrl-C; not a requeue).
A second Ctrl-C while that happens stops at once (`Interrupted`, a `SystemExit`: no traceback) and the
previous checkpoint stays the one autoresume takes. A terminal's Ctrl-C reaches the data workers too (one
process group), so they ignore SIGINT like the preemption signals.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType, TracebackType
from typing import Any

import torch

from foundry.parallel.dist import all_reduce_sum, world_size

__all__ = [
    "INTERRUPT_EXIT_CODE",
    "PREEMPTION_SIGNALS",
    "REQUEUE_EXIT_CODE",
    "STOP_SIGNALS",
    "Interrupted",
    "Preempted",
    "PreemptionWatch",
    "shield_workers",
]

REQUEUE_EXIT_CODE = 75
"""`EX_TEMPFAIL`: the exit code of a run stopped by a preemption signal after its checkpoint (requeue it)."""
INTERRUPT_EXIT_CODE = 130
"""128 + SIGINT: the exit code of a run stopped by Ctrl-C
(after its checkpoint, or at once on a second one)."""
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
STOP_SIGNALS = (*PREEMPTION_SIGNALS, signal.SIGINT)
"""Every signal that stops the run at the next step boundary with a checkpoint."""


class Interrupted(SystemExit):
    """A second Ctrl-C: the run stops at once, without its stop checkpoint (exit 130, no traceback)."""

    def __init__(self) -> None:
        super().__init__(INTERRUPT_EXIT_CODE)

    def __str__(self) -> str:
        return (
            "interrupted again (Ctrl-C): stopped at once, without a checkpoint of this step; rerun the same "
            "command with the run's run_name= to resume from its last complete checkpoint"
        )


class Preempted(SystemExit):
    """Raised by `Trainer.fit` after the preemption checkpoint; exits the process with `REQUEUE_EXIT_CODE`."""

    def __init__(self, *, step: int, signal_name: str, seconds: float) -> None:
        super().__init__(INTERRUPT_EXIT_CODE if signal_name == "SIGINT" else REQUEUE_EXIT_CODE)
        self.step = step
        self.signal_name = signal_name
        self.seconds = seconds

    def __str__(self) -> str:
        if self.signal_name == "SIGINT":
            return (
                f"interrupted (Ctrl-C) at step {self.step}: stopped {self.seconds:.1f} s after it, this step "
                f"checkpointed (unless checkpoint=none); exit code {INTERRUPT_EXIT_CODE}"
            )
        return (
            f"preempted by {self.signal_name} at step {self.step}: stopped {self.seconds:.1f} s after the "
            f"signal; exit code {REQUEUE_EXIT_CODE} (requeue); rerun the same command to resume, with the "
            "run's run_name= (`python -m foundry.runs resume <run>` prints that command)"
        )


class PreemptionWatch:
    """A context manager that turns preemption signals into a flag the ranks agree on at step boundaries.

    Args:
        grace: Seconds the scheduler allows after its signal (a warning is printed when stopping took longer);
            `<= 0` disables: no handler is installed and `should_stop` is always False.
        device: Where the all-reduced flag lives (the process group's device: cuda for nccl).
    """

    def __init__(self, grace: float, *, device: torch.device) -> None:
        self.grace = grace
        self.device = device
        self.signal_name: str | None = None
        self.received_at: float | None = None
        self._previous: dict[int, Any] = {}

    # ---------------------------------------------------------------- handlers
    def __enter__(self) -> PreemptionWatch:
        if self.grace > 0 and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Only records the signal (the first one wins); the step loop does the work. A Ctrl-C after a first
        stop signal raises `Interrupted` at once."""
        if signum == signal.SIGINT and self.received_at is not None:
            print(f"\n[foundry] {Interrupted()}", file=sys.stderr, flush=True)
            raise Interrupted()
        if self.received_at is None:
            self.signal_name = signal.Signals(signum).name
            self.received_at = time.monotonic()

    # ---------------------------------------------------------------- step boundary
    @property
    def active(self) -> bool:
        """True while handlers are installed."""
        return bool(self._previous)

    def should_stop(self) -> bool:
        """True on every rank when any rank got a signal (a collective with several ranks: call on all)."""
        if not self.active:
            return False
        mine = self.received_at is not None
        if world_size() == 1:
            return mine
        flag = torch.tensor([1.0 if mine else 0.0], device=self.device)
        return float(all_reduce_sum(flag).item()) > 0

    def stop(self, step: int) -> Preempted:
        """The exception to raise once the checkpoint is out (prints the report; warns past the grace)."""
        seconds = 0.0 if self.received_at is None else time.monotonic() - self.received_at
        err = Preempted(
            step=step, signal_name=self.signal_name or "a signal to another rank", seconds=seconds
        )
        print(f"[foundry] {err}", flush=True)
        if seconds > self.grace:
            print(
                f"[foundry] warning: stopping took {seconds:.1f} s, more than trainer.preemption_grace="
                f"{self.grace:g} s: a scheduler with that grace kills the run before its checkpoint is "
                "complete (the previous checkpoint is then resumed); shorten the steps or the checkpoint, or "
                "raise the scheduler's grace period and trainer.preemption_grace with it",
                flush=True,
            )
        return err


def _ignore_preemption_signals(worker_id: int, *, previous: Callable[[int], None] | None) -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if previous is not None:
        previous(worker_id)


# `loaders`: torch DataLoaders (or any iterables, or None)
def shield_workers(*loaders: Any) -> None:
    """Makes the loaders' worker processes ignore SIGTERM/SIGUSR1/SIGINT
    (chained before their `worker_init_fn`).

    Call before the first `iter(loader)`; a no-op for loaders without workers and when already shielded.
    Harmless with the handling off: the rank then dies of the signal and its workers follow it.
    """
    for loader in loaders:
        if getattr(loader, "num_workers", 0) <= 0 or not hasattr(loader, "worker_init_fn"):
            continue
        current = loader.worker_init_fn
        if not (isinstance(current, partial) and current.func is _ignore_preemption_signals):
            loader.worker_init_fn = partial(_ignore_preemption_signals, previous=current)
