"""A run's state and headline numbers, from the files in its directory.

Design note: the state is a pure function (`decide_state`) of three records, so every case is a unit test:
`events.jsonl` (the supervised launcher: start, failure, restart, resumed, summary with the exit code),
`live.json` (rank 0's liveness record, `foundry.callbacks.liveness`) and whether `final_metrics.json`
exists. Rules, in order: a launch that ended (a `summary` after the last `start`) is finished (ok),
preempted (exit 75, or a `stop` event from `runs stop` before it) or failed; a launch still going whose
last failure/restart is newer than its last `resumed` (and than a fresh live record of the new attempt)
is restarting; a fresh live record is running (on this host only while its pid is alive); a live record
in phase `done`/`preempted` says so; a stale one in any other phase is a run that died (failed); without
records, a run whose lock a process holds is running (still starting), `final_metrics.json` means finished,
and a local run whose lock nobody holds is a run killed before its first step (failed; issue 40: it showed as
`unknown 0/?`). Anything else is `unknown` (a run on a bucket, or one made before the lock existed).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from foundry.live import LIVE_FILE, Live, read_live, stale_after
from foundry.rundir import layout
from foundry.rundir.lock import lock_held
from foundry.runs.records import record, rows
from foundry.runs.store import RunRoot
from stackbase.process import pid_alive

__all__ = ["STATES", "RunFiles", "RunSummary", "decide_state", "load_run", "parse_jsonl", "summarize"]

STATES = ("running", "finished", "failed", "preempted", "restarting", "unknown")
# foundry.train.preemption.REQUEUE_EXIT_CODE (not imported: that pulls in torch)
REQUEUE_EXIT_CODE = 75


def parse_jsonl(text: str | None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL text; a torn or broken line (a writer mid-append) is skipped."""
    return rows(text, source="jsonl")


def _event(e: dict[str, Any]) -> bool:
    """An event line of the shape the readers use: a name, and a time that is a number
    (others are skipped)."""
    when = e.get("time", 0.0)
    return isinstance(e.get("event"), str) and isinstance(when, int | float) and not isinstance(when, bool)


def _last_launch(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events from the last launcher `start` on (all of them when there is none)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    return events[starts[-1] :] if starts else events


def decide_state(
    *,
    events: list[dict[str, Any]],
    live: Live | None,
    has_final: bool,
    now: float,
    pid_alive: bool | None,
    lock_held: bool | None = None,
) -> str:
    """One of `STATES` (rules in the module note). `pid_alive`: None when the pid cannot be checked here.
    `lock_held`: whether a process holds the run's lock (`foundry.rundir.lock.lock_held`; None: cannot tell),
    which tells a run still starting (no live.json yet) from one killed before its first step."""
    launch = _last_launch(events)
    kinds = [e.get("event") for e in launch]
    if "summary" in kinds:
        summary = launch[len(kinds) - 1 - kinds[::-1].index("summary")]
        if summary.get("ok"):
            return "finished"
        # `runs stop`, or a scheduler
        stopped = "stop" in kinds or summary.get("exit_code") == REQUEUE_EXIT_CODE
        return "preempted" if stopped else "failed"
    fresh = live is not None and now - live.time <= stale_after(live.interval_s) and pid_alive is not False
    if "start" in kinds:
        trouble = max((i for i, k in enumerate(kinds) if k in ("failure", "restart")), default=-1)
        resumed = max((i for i, k in enumerate(kinds) if k == "resumed"), default=-1)
        if trouble > resumed and not _resumed_live(launch[trouble], live, fresh=fresh):
            return "restarting"
    if live is not None:
        if live.phase == "done":
            return "finished"
        if live.phase == "preempted" and not fresh:
            return "preempted"
        return "running" if fresh else "failed"
    if lock_held:
        return "running"
    if has_final:
        return "finished"
    return "failed" if lock_held is False else "unknown"


def _resumed_live(trouble: dict[str, Any], live: Live | None, *, fresh: bool) -> bool:
    """A fresh live record written after `trouble` by the restarted attempt
    (the launcher may miss `resumed`)."""
    if live is None or not fresh or live.time <= float(trouble.get("time", 0.0)):
        return False
    return live.attempt > int(trouble.get("attempt", 0)) - (trouble.get("event") == "restart")


@dataclass(kw_only=True)
class RunFiles:
    """The small files of one run directory, read once."""

    name: str
    run: dict[str, Any]
    metrics: list[dict[str, Any]]
    events: list[dict[str, Any]]
    live: Live | None
    final: dict[str, Any] | None
    written: tuple[float | None, float | None] = (None, None)
    """Local runs: when `config.yaml` and the newest of metrics.jsonl/final_metrics.json were written (the
    start and end of a run without events or live.json); (None, None) for a bucket."""
    lock_held: bool | None = None
    """Local runs: whether a process holds the run's lock now (None: a bucket, or no lock file)."""


def load_run(root: RunRoot, rel: str) -> RunFiles:
    """Reads `run.json`, `metrics.jsonl`, `events.jsonl`,
    `live.json` and `final_metrics.json` of run `rel`."""
    run_text, live_text = root.read_text(rel, layout.RUN), root.read_text(rel, LIVE_FILE)
    final_text = root.read_text(rel, layout.FINAL_METRICS)
    ends = [
        t for t in (root.mtime(rel, layout.METRICS), root.mtime(rel, layout.FINAL_METRICS)) if t is not None
    ]
    return RunFiles(
        name=rel,
        run=record(run_text, source=f"{rel}/{layout.RUN}", mappings=("config", "derived")),
        metrics=parse_jsonl(root.read_text(rel, layout.METRICS)),
        events=[e for e in parse_jsonl(root.read_text(rel, layout.EVENTS)) if _event(e)],
        live=read_live(live_text) if live_text else None,
        final=record(final_text, source=f"{rel}/{layout.FINAL_METRICS}") if final_text else None,
        written=(root.mtime(rel, layout.CONFIG), max(ends) if ends else None),
        lock_held=None if root.remote else lock_held(root.url(rel)),
    )


def pid_alive_here(live: Live | None) -> bool | None:
    """Whether the live record's pid runs, when it was written on this host (None: cannot tell)."""
    if live is None or live.host != socket.gethostname():
        return None
    return pid_alive(live.pid)


@dataclass(kw_only=True)
class RunSummary:
    """One line of `runs list`."""

    name: str
    task: str
    state: str
    step: int
    max_steps: int | None
    loss: float | None
    tokens_per_s: float | None
    started: float | None
    duration_s: float | None
    restarts: int
    time_lost_s: float


def _last(metrics: list[dict[str, Any]], key: str) -> float | None:
    for rec in reversed(metrics):
        if isinstance(rec.get(key), int | float):
            return float(rec[key])
    return None


def summarize(files: RunFiles, *, now: float | None = None, local: bool = True) -> RunSummary:
    """The `runs list` line of a run (`local`: the pid in live.json may be checked on this host)."""
    now = time.time() if now is None else now
    live = files.live
    state = decide_state(
        events=files.events, live=live, has_final=files.final is not None, now=now,
        pid_alive=pid_alive_here(live) if local else None, lock_held=files.lock_held if local else None,
    )  # fmt: skip
    steps = [int(r["step"]) for r in files.metrics if isinstance(r.get("step"), int)]
    step = max([*steps, live.step if live else 0, 0])
    max_steps = files.run.get("derived", {}).get("max_steps") or (live.max_steps if live else None)
    starts = [float(e["time"]) for e in files.events if e.get("event") == "start" and "time" in e]
    started = min(starts) if starts else (live.started if live else files.written[0])
    ends = [float(e["time"]) for e in files.events if e.get("event") == "summary"]
    end = now if state in ("running", "restarting") else (live.time if live else files.written[1])
    if ends and state not in ("running", "restarting"):
        end = max(ends)
    return RunSummary(
        name=files.name, task=str(files.run.get("config", {}).get("task", "-")), state=state, step=step,
        max_steps=max_steps, loss=_last(files.metrics, "train/loss"),
        tokens_per_s=_last(files.metrics, "throughput/tokens_per_sec"), started=started,
        duration_s=end - started if started is not None and end is not None else None,
        restarts=sum(e.get("event") == "restart" for e in files.events),
        time_lost_s=sum(
            float(e.get("time_lost_s", 0.0)) for e in files.events if e.get("event") == "resumed"
        ),
    )  # fmt: skip
