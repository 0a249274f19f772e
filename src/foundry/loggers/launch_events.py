"""The launcher's events for loggers other than W&B: changed `launch/*` counters, read when `events.jsonl` grows.

Design note: the same contract as the W&B logger (`foundry.loggers.wandb`, whose `launch_counters` this reuses):
only under the supervised launcher (the run directory has `events.jsonl` when the logger starts), the file is
reread when its size changed, and the cumulative counters that changed since the last read are returned for
the caller to log with the metrics of the current step (a history cannot go back in step, so counters, not
one row per event). The whole event list goes to the run as a file at the end (MLflow artifact, TensorBoard
text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundry.events import EVENTS_FILE, read_events
from foundry.loggers.wandb import launch_counters

__all__ = ["LaunchEvents"]


class LaunchEvents:
    """Watches `<run_dir>/events.jsonl` (inactive when the run was not started by the launcher)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self.active = self.path.exists()
        self._size = -1
        self._counters: dict[str, float] = {}

    def changed_counters(self) -> dict[str, float]:
        """The `launch/*` counters that changed since the last call (all of them on the first)."""
        if not self.active:
            return {}
        try:
            size = self.path.stat().st_size
        except OSError:
            return {}
        if size == self._size:
            return {}
        self._size = size
        counters = launch_counters(read_events(self.path.parent))
        changed = {k: v for k, v in counters.items() if self._counters.get(k) != v}
        self._counters = counters
        return changed

    def events(self) -> list[dict[str, Any]]:
        """Every event so far ([] when inactive)."""
        return read_events(self.path.parent) if self.active else []
