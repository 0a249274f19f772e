"""The launcher's events for loggers other than W&B:
changed `launch/*` counters, read when `events.jsonl` grows.

Design note: one contract for every logger (W&B, MLflow, TensorBoard): only under the supervised launcher (the
run directory has `events.jsonl` when the logger starts), the file is reread when its size changed, and the
cumulative counters that changed since the last read are returned for the caller to log with the metrics of
the current step (a history cannot go back in step, so counters, not one row per event). The whole event list
goes to the run as a file at the end (MLflow artifact, TensorBoard text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundry.events import EVENTS_FILE, read_events

__all__ = ["LaunchEvents", "launch_counters"]

_COUNTED = {"failure": "failures", "restart": "restarts", "preempted": "preemptions", "fatal": "fatal"}


def launch_counters(events: list[dict[str, Any]]) -> dict[str, float]:
    """Cumulative `launch/*` numbers of a run's events (all launches of the run directory)."""
    out: dict[str, float] = {f"launch/{name}": 0.0 for name in _COUNTED.values()}
    out["launch/time_lost_s"] = 0.0
    for e in events:
        if e.get("event") in _COUNTED:
            out[f"launch/{_COUNTED[e['event']]}"] += 1
        if e.get("event") == "resumed":
            out["launch/time_lost_s"] += float(e.get("time_lost_s") or 0.0)
            out["launch/resumed_step"] = float(e.get("resumed_step") or 0)
    return out


class LaunchEvents:
    """Watches `<run_dir>/events.jsonl` (inactive when the run was not started by the launcher)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self.active = self.path.exists()
        self._size = -1
        self.counters: dict[str, float] = {}
        """The cumulative counters as of the last read."""

    def poll(self) -> tuple[list[dict[str, Any]], dict[str, float]] | None:
        """(every event, the counters that changed since the last read) when the file grew, else None."""
        if not self.active:
            return None
        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if size == self._size:
            return None
        self._size = size
        events = read_events(self.path.parent)
        counters = launch_counters(events)
        changed = {k: v for k, v in counters.items() if self.counters.get(k) != v}
        self.counters = counters
        return events, changed

    def changed_counters(self) -> dict[str, float]:
        """The `launch/*` counters that changed since the last call (all of them on the first)."""
        polled = self.poll()
        return polled[1] if polled is not None else {}

    def events(self) -> list[dict[str, Any]]:
        """Every event so far ([] when inactive)."""
        return read_events(self.path.parent) if self.active else []
