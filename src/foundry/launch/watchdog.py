"""Hang watchdog: decides from the ranks' heartbeats whether the group has stopped making progress.

Design note: the decision is a pure function of what the heartbeats show (`hang_deadline`, `Progress.hung`),
so it is tested without processes; the launcher's loop (`foundry.launch.agent`) only feeds it beats and acts
on the verdict (dump stacks with SIGUSR2, kill the ranks so torchrun's agent restarts the group). A group
counts as hung when *no* rank has advanced its step for `max(K x median step time, floor)` seconds; it is
armed only once a rank reached fit start, so data preparation and health checks never look like a hang.
Those have their own, generous deadline instead (`startup`, seconds from the attempt's first beat to the
first rank's fit start: a rank stuck in the all-reduce check, the data, a checkpoint download).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from foundry.callbacks.heartbeat import Beat

__all__ = ["STARTUP_PHASES", "Progress", "hang_deadline", "stuck_phase"]

STARTUP_PHASES = {
    "start": "health checks (devices, disk, stores, the all-reduce)",
    "healthy": "train.py before fit (config, data, model, checkpoint load, process group)",
}


def hang_deadline(step_seconds: list[float], *, k: float, floor: float) -> float:
    """Seconds without progress that count as a hang: `max(k x median(step_seconds), floor)`."""
    if not step_seconds:
        return floor
    return max(k * statistics.median(step_seconds), floor)


@dataclass
class Progress:
    """What the watchdog has seen of one attempt: the last (rank, step) change and the step times."""

    k: float
    floor: float
    startup: float = 1800.0
    """Seconds an attempt may take from its first beat until a rank reaches fit start."""
    attempt: int = -1
    started_at: float = 0.0
    last_change: float = 0.0
    steps: dict[int, int] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    armed: bool = False

    def observe(self, beats: dict[int, Beat], now: float) -> None:
        """Records beats of the current attempt; a new step on any rank counts as progress."""
        for rank, beat in beats.items():
            if beat.attempt != self.attempt or beat.phase not in ("fit", "step", "done"):
                continue
            if not self.armed:
                self.armed, self.last_change = True, now
            if self.steps.get(rank) != beat.step or beat.phase == "done":
                if beat.phase == "step" and rank == min(beats) and beat.step_seconds > 0:
                    self.step_seconds = [*self.step_seconds[-99:], beat.step_seconds]
                self.steps[rank] = beat.step
                self.last_change = now

    def new_attempt(self, attempt: int, now: float = 0.0) -> None:
        """Forgets the previous attempt's progress (step times are kept: same model, same machine)."""
        self.attempt, self.armed, self.steps, self.started_at = attempt, False, {}, now

    def deadline(self) -> float:
        return hang_deadline(self.step_seconds, k=self.k, floor=self.floor)

    def hung(self, now: float, *, done: bool) -> bool:
        """True when armed, not finished, and nothing advanced for longer than the deadline."""
        return self.armed and not done and now - self.last_change > self.deadline()

    def stuck_starting(self, now: float, *, done: bool) -> bool:
        """True when no rank reached fit start within `startup` seconds of the attempt's first beat."""
        return self.attempt >= 0 and not self.armed and not done and now - self.started_at > self.startup


def stuck_phase(phases: list[str]) -> str:
    """The earliest start-up phase any rank is still in (`start`: health checks; `healthy`: before fit)."""
    order = list(STARTUP_PHASES)
    known = [p for p in phases if p in order]
    return min(known, key=order.index) if known else (phases[0] if phases else "start")
