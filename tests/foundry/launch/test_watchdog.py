"""The hang decision: `max(K x median step time, floor)`, armed at fit start, reset per attempt."""

from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from foundry.callbacks.heartbeat import Beat
from foundry.launch import Progress, hang_deadline
from foundry.launch.watchdog import stuck_phase


def _beat(rank: int, step: int, *, phase: str = "step", attempt: int = 0, seconds: float = 0.1) -> Beat:
    return Beat(rank=rank, pid=1, attempt=attempt, phase=phase, step=step, time=0.0, step_seconds=seconds)


@given(
    st.lists(st.floats(0.001, 100.0), max_size=50),
    st.floats(0.5, 50.0),
    st.floats(0.0, 600.0),
)
def test_deadline_is_k_median_or_floor(times, k, floor):
    got = hang_deadline(times, k=k, floor=floor)
    assert got >= floor
    if times:
        assert got >= k * statistics.median(times) * (1 - 1e-12)
        assert got in (floor, k * statistics.median(times))
    else:
        assert got == floor


def test_not_armed_before_fit_start():
    p = Progress(k=10, floor=5)
    p.new_attempt(0)
    p.observe({0: _beat(0, 0, phase="healthy")}, now=0.0)
    assert not p.hung(1000.0, done=False)


def test_hung_when_no_rank_advances():
    p = Progress(k=10, floor=5)
    p.new_attempt(0)
    p.observe({0: _beat(0, 3, phase="fit"), 1: _beat(1, 3, phase="fit")}, now=0.0)
    p.observe({0: _beat(0, 4), 1: _beat(1, 4)}, now=1.0)
    assert not p.hung(5.9, done=False)
    p.observe({0: _beat(0, 5), 1: _beat(1, 4)}, now=5.0)  # one rank moving is progress
    assert not p.hung(9.9, done=False)
    assert p.hung(10.1, done=False)
    assert not p.hung(10.1, done=True)


def test_deadline_follows_slow_steps():
    p = Progress(k=10, floor=1)
    p.new_attempt(0)
    for step in range(1, 6):
        p.observe({0: _beat(0, step, seconds=2.0)}, now=float(step))
    assert p.deadline() == 20.0
    assert not p.hung(24.0, done=False) and p.hung(25.1, done=False)


def test_new_attempt_ignores_old_beats_and_disarms():
    p = Progress(k=10, floor=5)
    p.new_attempt(0)
    p.observe({0: _beat(0, 7)}, now=0.0)
    p.new_attempt(1)
    p.observe({0: _beat(0, 7)}, now=1.0)  # still attempt 0's beat
    assert not p.armed and not p.hung(100.0, done=False)


def test_startup_deadline_from_the_attempts_first_beat():
    p = Progress(k=10, floor=5, startup=30)
    assert not p.stuck_starting(1e9, done=False), "no attempt seen yet"
    p.new_attempt(0, now=100.0)
    p.observe({0: _beat(0, 0, phase="healthy")}, now=101.0)
    assert not p.stuck_starting(130.0, done=False)
    assert p.stuck_starting(130.1, done=False)
    assert not p.stuck_starting(130.1, done=True)
    p.observe({0: _beat(0, 0, phase="fit")}, now=131.0)
    assert not p.stuck_starting(1000.0, done=False), "fit start hands over to the hang deadline"
    p.new_attempt(1, now=2000.0)
    assert not p.stuck_starting(2029.0, done=False) and p.stuck_starting(2031.0, done=False)


@given(st.lists(st.sampled_from(["start", "healthy", "fit", "step"]), min_size=1))
def test_stuck_phase_is_the_earliest_start_up_phase(phases):
    got = stuck_phase(phases)
    if "start" in phases:
        assert got == "start"
    elif "healthy" in phases:
        assert got == "healthy"
    else:
        assert got == phases[0]
