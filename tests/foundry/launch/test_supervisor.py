"""The supervisor's bookkeeping from heartbeats alone: failures, restarts, resumed step, time lost, hangs."""

from __future__ import annotations

import os
import subprocess
import sys

from foundry.callbacks.heartbeat import Beat
from foundry.launch import Progress, read_events
from foundry.launch.agent import Supervisor, alive


def _beat(rank: int, step: int, pid: int, *, phase: str = "step", attempt: int = 0) -> Beat:
    return Beat(rank=rank, pid=pid, attempt=attempt, phase=phase, step=step, time=0.0, step_seconds=0.5)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_alive():
    assert alive(os.getpid())
    assert not alive(_dead_pid())


def test_dead_rank_then_restart_then_resume(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    me, dead = os.getpid(), _dead_pid()
    sup.tick({0: _beat(0, 10, me), 1: _beat(1, 10, me)}, now=10.0)
    sup.tick({0: _beat(0, 11, me), 1: _beat(1, 11, dead)}, now=11.0)
    sup.tick({0: _beat(0, 11, me), 1: _beat(1, 11, dead)}, now=11.5)  # reported once
    sup.tick({0: _beat(0, 9, me, phase="fit", attempt=1), 1: _beat(1, 0, me, phase="start", attempt=1)}, 14.0)
    sup.tick({0: _beat(0, 10, me, attempt=1), 1: _beat(1, 10, me, attempt=1)}, now=15.0)
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["failure", "restart", "resumed"]
    failure, _, resumed = events
    assert (failure["rank"], failure["cause"], failure["ranks"], failure["step"]) == (1, "exited", [1], 11)
    assert resumed["resumed_step"] == 9 and resumed["steps_lost"] == 2
    assert resumed["time_lost_s"] == (15.0 - 11.0) + 2 * 0.5
    assert sup.failures == 1 and sup.final_step == 11


def test_restart_seen_before_the_dead_rank_still_counts(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    sup.tick({0: _beat(0, 4, os.getpid())}, now=1.0)
    sup.tick({0: _beat(0, 0, os.getpid(), phase="start", attempt=1)}, now=2.0)
    assert [e["event"] for e in read_events(tmp_path)] == ["failure", "restart"]


def test_hang_signals_every_rank_and_records_stacks(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sup = Supervisor(tmp_path, "L", Progress(k=10, floor=1), dump_wait_s=0.0)
        sup.tick({0: _beat(0, 5, sleeper.pid, phase="fit")}, now=0.0)
        sup.tick({0: _beat(0, 5, sleeper.pid)}, now=1.5)
        assert sleeper.wait(timeout=10) != 0  # SIGUSR2 (no handler here) or SIGKILL ended it
    finally:
        sleeper.kill()
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["stacks", "failure"]
    assert events[0]["paths"] == [str(tmp_path / "stacks" / "L-attempt0-rank0.txt")]
    assert events[1]["cause"] == "hang" and events[1]["stalled_s"] == 1.5
