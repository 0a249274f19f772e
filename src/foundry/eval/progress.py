"""Progress lines during ICL evaluation: one line every few seconds per task, and one when it ends.

`[eval] task 2/7 hellaswag 0-shot: 1,200/4,000 examples (30%), 85.2 examples/s, ~33 s left`. The scorer
reports requests (one per choice of a multiple-choice example), which become examples in proportion. No
global state: each task gets its own `TaskProgress`, whose clock and output are injectable (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TaskProgress", "print_line"]


def print_line(line: str) -> None:
    """Prints `line` at once (progress must show while the work runs)."""
    print(line, flush=True)


class TaskProgress:
    """Counts requests scored for one task and prints a line at most every `every_s` seconds.

    Args:
        label: The task's label (with its shot count). index, count: this task's place in the run (1-based).
        examples: Examples in the task. requests: Requests the scorer will report (>= examples).
        every_s: Seconds between lines (0: only the final line).
        emit: Where lines go (default: print, flushed). clock: Seconds, monotonic.
    """

    def __init__(
        self,
        label: str,
        *,
        index: int,
        count: int,
        examples: int,
        requests: int,
        every_s: float = 5.0,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.head = f"[eval] task {index}/{count} {label}"
        self.examples, self.requests = examples, max(requests, 1)
        self.every_s = every_s
        self.emit = emit or print_line
        self.clock = clock
        self.started = self.last = clock()
        self.done = 0

    def __call__(self, n: int) -> None:
        """`n` more requests are scored."""
        self.done = min(self.done + n, self.requests)
        now = self.clock()
        if self.every_s > 0 and now - self.last >= self.every_s and self.done < self.requests:
            self.last = now
            ex = self.examples * self.done // self.requests
            rate = ex / max(now - self.started, 1e-9)
            left = (self.examples - ex) / rate if rate > 0 else float("inf")
            self.emit(
                f"{self.head}: {ex:,}/{self.examples:,} examples ({100 * ex // max(self.examples, 1)}%), "
                f"{rate:.1f} examples/s, ~{left:.0f} s left"
            )

    def finish(self, metrics: dict[str, float]) -> None:
        """The task's closing line: examples, seconds, rate and its metrics."""
        seconds = self.clock() - self.started
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        self.emit(
            f"{self.head}: {self.examples:,} examples in {seconds:.1f} s "
            f"({self.examples / max(seconds, 1e-9):.1f} examples/s){': ' + shown if shown else ''}"
        )
