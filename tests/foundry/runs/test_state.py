"""`decide_state` rules, the liveness record, JSONL parsing and run discovery on a local folder."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundry.callbacks.liveness import Liveness
from foundry.live import LIVE_FILE, Live, read_live, stale_after
from foundry.runs.state import STATES, decide_state, load_run, parse_jsonl, summarize
from foundry.runs.store import RunRoot, resolve_run

NOW = 1_000_000.0


def live(phase: str = "step", *, age: float = 1.0, attempt: int = 0) -> Live:
    return Live(pid=1, host="h", step=5, max_steps=10, phase=phase, time=NOW - age, started=NOW - 100,
                attempt=attempt)  # fmt: skip


def ev(event: str, t: float, **fields: object) -> dict[str, object]:
    return {"event": event, "time": t, **fields}


@pytest.mark.parametrize(
    ("events", "lv", "final", "alive", "want"),
    [
        ([], None, False, None, "unknown"),
        ([], None, True, None, "finished"),
        ([], live("step"), False, None, "running"),
        ([], live("step"), False, False, "failed"),  # fresh record, but its pid is gone on this host
        ([], live("step", age=600), False, None, "failed"),  # stale in a training phase: died
        ([], live("done", age=600), True, None, "finished"),
        ([], live("preempted", age=600), False, None, "preempted"),
        ([], live("preempted", age=1), False, None, "running"),  # still checkpointing
        ([ev("start", 1), ev("summary", 9, ok=True, exit_code=0)], live("step"), True, None, "finished"),
        ([ev("start", 1), ev("summary", 9, ok=False, exit_code=75)], None, False, None, "preempted"),
        ([ev("start", 1), ev("summary", 9, ok=False, exit_code=1)], None, False, None, "failed"),
        ([ev("start", 1), ev("stop", 5), ev("summary", 9, ok=False, exit_code=1)], None, False, None, "preempted"),
        ([ev("start", 1), ev("failure", 5, attempt=0), ev("restart", 6, attempt=1)], live(age=1e5), 0, 0, "restarting"),
        (
            [ev("start", 1), ev("failure", 5, attempt=0), ev("restart", 6, attempt=1), ev("resumed", 8, attempt=1)],
            live("step", attempt=1), False, None, "running",
        ),
        # the launcher missed `resumed` (a hang restart), but the restarted attempt's live record is fresh
        ([ev("start", 1), ev("restart", 6, attempt=1)], live("step", attempt=1), False, None, "running"),
        ([ev("start", 1), ev("restart", 6, attempt=1)], live("step", attempt=0), False, None, "restarting"),
        # a later launch after a finished one: only the last launch counts
        ([ev("start", 1), ev("summary", 2, ok=True), ev("start", 3)], live("step"), True, None, "running"),
    ],
)  # fmt: skip
def test_decide_state(events, lv, final, alive, want) -> None:
    assert decide_state(events=events, live=lv, has_final=bool(final), now=NOW, pid_alive=alive) == want


@pytest.mark.parametrize(
    ("lock", "final", "want"),
    [(True, False, "running"), (False, False, "failed"), (False, True, "finished"), (None, False, "unknown")],
)
def test_a_run_without_live_record_is_told_by_its_lock(lock, final, want) -> None:
    """Issue 40 item 6: a run killed before its first step (no live.json) showed as `unknown 0/?`."""
    assert (
        decide_state(events=[], live=None, has_final=final, now=NOW, pid_alive=None, lock_held=lock) == want
    )


def test_lock_held_reads_the_kernels_lock_table(tmp_path) -> None:
    from foundry.rundir.lock import RunLock, lock_held

    assert lock_held(tmp_path) is None  # no lock file: cannot tell
    lock = RunLock(tmp_path, run_name="r")
    lock.acquire()
    assert lock_held(tmp_path) is True
    lock.release()
    assert lock_held(tmp_path) is False


@given(
    events=st.lists(
        st.builds(
            ev,
            st.sampled_from(["start", "failure", "restart", "resumed", "summary", "health"]),
            st.floats(0, NOW),
            ok=st.booleans(),
            exit_code=st.sampled_from([0, 1, 75]),
            attempt=st.integers(0, 3),
        ),  # fmt: skip
        max_size=8,
    ),
    phase=st.sampled_from(["fit", "step", "preempted", "done", None]),
    age=st.floats(0, 1e4),
    final=st.booleans(),
    alive=st.sampled_from([True, False, None]),
)
def test_decide_state_total(events, phase, age, final, alive) -> None:
    """Any mix of records gives one of the states, and a launch that ended never reads as running."""
    lv = None if phase is None else live(phase, age=age)
    state = decide_state(events=events, live=lv, has_final=final, now=NOW, pid_alive=alive)
    assert state in STATES
    starts = [i for i, e in enumerate(events) if e["event"] == "start"]
    tail = events[starts[-1] :] if starts else events
    if any(e["event"] == "summary" for e in tail):
        assert state in ("finished", "failed", "preempted")


def test_parse_jsonl_skips_a_torn_line() -> None:
    assert parse_jsonl('{"step": 1}\n{"step": 2, "train/lo\n[1]\n') == [{"step": 1}]


def test_stale_after_has_a_floor() -> None:
    assert stale_after(1.0) == 60.0 and stale_after(100.0) == 300.0


def _trainer(step: int, *, stop: bool = False) -> SimpleNamespace:
    return SimpleNamespace(state=SimpleNamespace(step=step), max_steps=10, stop_requested=stop)


def test_liveness_callback_writes_rank0_record(tmp_path: Path) -> None:
    cb = Liveness(tmp_path, interval_s=3600)
    cb.on_fit_start(_trainer(0))
    rec = read_live((tmp_path / LIVE_FILE).read_text())
    assert rec is not None and (rec.phase, rec.step, rec.pid, rec.host) == (
        "fit",
        0,
        os.getpid(),
        socket.gethostname(),
    )
    cb.on_step_end(_trainer(1), step_seconds=0.1)  # within the interval: not rewritten
    assert read_live((tmp_path / LIVE_FILE).read_text()).step == 0  # type: ignore[union-attr]
    cb.on_step_end(_trainer(2, stop=True), step_seconds=0.1)  # a preemption stop is written at once
    assert read_live((tmp_path / LIVE_FILE).read_text()).phase == "preempted"  # type: ignore[union-attr]
    cb.on_fit_end(_trainer(10))
    assert read_live((tmp_path / LIVE_FILE).read_text()).phase == "done"  # type: ignore[union-attr]
    other = tmp_path / "rank1"
    Liveness(other, rank=1).on_fit_start(_trainer(0))
    assert not other.exists()


def _run_dir(base: Path, name: str, *, steps: int, final: bool) -> Path:
    d = base / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"config": {"task": "pretrain"}, "derived": {"max_steps": 10}}))
    (d / "config.yaml").write_text("task: pretrain\n")
    lines = [
        {"step": s, "train/loss": 5.0 - s / 10, "throughput/tokens_per_sec": 100.0 * s}
        for s in range(1, steps + 1)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 99, "tra')
    if final:
        (d / "final_metrics.json").write_text(json.dumps({"train/loss": 4.0}))
    (d / "checkpoints" / "ep0-ba5").mkdir(parents=True)
    (d / "checkpoints" / "ep0-ba5" / "run.json").write_text("{}")  # inside checkpoints/: never a run
    return d


def test_discovery_and_summary(tmp_path: Path) -> None:
    _run_dir(tmp_path, "a", steps=10, final=True)
    live_dir = _run_dir(tmp_path, "sweep/0_lr=1", steps=3, final=False)
    rec = live("step", age=0)
    rec.time, rec.host, rec.pid = time.time(), socket.gethostname(), os.getpid()
    (live_dir / LIVE_FILE).write_text(json.dumps(rec.__dict__))
    root = RunRoot(str(tmp_path))
    assert root.runs() == ["a", "sweep/0_lr=1"]
    a = summarize(load_run(root, "a"))
    assert (a.state, a.step, a.max_steps, a.loss, a.tokens_per_s) == ("finished", 10, 10, 4.0, 1000.0)
    assert a.started is not None and a.duration_s is not None
    b = summarize(load_run(root, "sweep/0_lr=1"))
    assert (b.state, b.step) == ("running", 5)  # live.json's step is ahead of the logged metrics
    assert resolve_run("sweep", root=str(tmp_path))[1] == "sweep"
    with pytest.raises(FileNotFoundError, match="runs there: a, sweep/0_lr=1"):
        resolve_run("nope", root=str(tmp_path))
