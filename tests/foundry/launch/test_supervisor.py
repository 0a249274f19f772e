"""The supervisor's bookkeeping from heartbeats alone: failures, restarts, resumed step, time lost, hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from foundry.callbacks.heartbeat import Beat
from foundry.launch import Progress, read_events
from foundry.launch.agent import STOP_SIGNAL, Supervisor
from foundry.launch.worker import ExitNote, exit_note_for, peer_failure, write_exit_note
from streaming.cache.space import pid_alive as alive


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


def test_the_rank_that_died_is_blamed_not_the_one_its_death_stopped(tmp_path, capsys):
    """Issue 40 item 5: after kill -9 of rank 1, rank 0 failed in its next collective; both were gone at the
    launcher's next look and it named rank 0 (the lowest). Rank 0 left a `peer` note: rank 1 is blamed."""
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    me, dead0, dead1 = os.getpid(), _dead_pid(), _dead_pid()
    sup.tick({0: _beat(0, 241, me), 1: _beat(1, 241, me)}, now=10.0)
    write_exit_note(tmp_path / "heartbeat", ExitNote(rank=0, pid=dead0, attempt=0, code=1, kind="peer",
                                                     cause="peer", step=242, detail="Connection closed by peer"))  # fmt: skip
    sup.tick({0: _beat(0, 242, dead0), 1: _beat(1, 242, dead1)}, now=11.0)
    (failure,) = read_events(tmp_path)
    assert (failure["rank"], failure["ranks"]) == (1, [0, 1])
    assert "rank 1 exited at step 242" in capsys.readouterr().err


def test_errors_that_say_a_peer_went_away():
    assert peer_failure(RuntimeError("[pair.cc:534] Connection closed by peer [127.0.0.1]:1234\nmore")) == (
        "[pair.cc:534] Connection closed by peer [127.0.0.1]:1234"
    )
    assert peer_failure(RuntimeError("NCCL communicator was aborted on rank 0")) is not None
    assert peer_failure(RuntimeError("CUDA error: an illegal memory access")) is None
    assert peer_failure(ValueError("bad config")) is None


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


def _sleeper() -> subprocess.Popen:
    """A stand-in for torchrun (which installs its own SIGHUP/SIGINT handlers): default signal dispositions even
    when the tests run under `nohup` or in a background job (which start children with them ignored)."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=_default_signals
    )


def _default_signals() -> None:
    """In the child before exec (no race with an early signal): SIGHUP and SIGINT back to their defaults."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def test_startup_timeout_dumps_kills_and_names_the_phase(tmp_path):
    rank = _sleeper()
    try:
        sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5, startup=2.0), dump_wait_s=0.0)
        sup.tick({0: _beat(0, 0, rank.pid, phase="start")}, now=100.0)
        sup.tick({0: _beat(0, 0, rank.pid, phase="healthy")}, now=101.9)
        assert read_events(tmp_path) == []
        sup.tick({0: _beat(0, 0, rank.pid, phase="healthy")}, now=102.1)
        assert rank.wait(timeout=10) != 0
    finally:
        rank.kill()
    stacks, failure = read_events(tmp_path)
    assert stacks["event"] == "stacks" and stacks["deadline_s"] == 2.0
    assert (failure["cause"], failure["phase"], failure["stalled_s"]) == ("startup", "healthy", 2.1)
    assert "train.py before fit" in failure["stuck_in"]


def test_no_startup_timeout_once_a_rank_is_in_fit(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=50, startup=2.0))
    me = os.getpid()
    sup.tick({0: _beat(0, 0, me, phase="fit"), 1: _beat(1, 0, me, phase="healthy")}, now=0.0)
    sup.tick({0: _beat(0, 0, me, phase="fit"), 1: _beat(1, 0, me, phase="healthy")}, now=10.0)
    assert read_events(tmp_path) == []


def test_fatal_exit_note_stops_torchrun_with_its_code(tmp_path):
    torchrun = _sleeper()
    try:
        sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
        sup.proc = torchrun
        me = os.getpid()
        sup.tick({0: _beat(0, 0, me, phase="healthy"), 1: _beat(1, 0, me, phase="healthy")}, now=1.0)
        note = exit_note_for(2, rank=1, attempt=0, step=0)
        assert note is not None
        write_exit_note(tmp_path / "heartbeat", note)
        sup.tick({0: _beat(0, 0, me, phase="healthy"), 1: _beat(1, 0, me, phase="healthy")}, now=2.0)
        assert torchrun.wait(timeout=10) == -STOP_SIGNAL
    finally:
        torchrun.kill()
    (fatal,) = read_events(tmp_path)
    assert (fatal["event"], fatal["cause"], fatal["exit_code"], fatal["rank"]) == ("fatal", "config", 2, 1)
    assert (sup.exit_code, sup.stop_cause, sup.failures) == (2, "fatal", 0)


def test_preempted_notes_of_every_rank_end_the_launch_with_75(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    me = os.getpid()
    beats = {0: _beat(0, 12, me), 1: _beat(1, 12, me)}
    sup.tick(beats, now=1.0)
    write_exit_note(tmp_path / "heartbeat", exit_note_for(75, rank=0, attempt=0, step=12))  # type: ignore[arg-type]
    sup.tick(beats, now=2.0)
    assert sup.exit_code is None, "waits for every rank's checkpoint exit"
    write_exit_note(tmp_path / "heartbeat", exit_note_for(75, rank=1, attempt=0, step=12))  # type: ignore[arg-type]
    sup.tick(beats, now=3.0)
    (preempted,) = read_events(tmp_path)
    assert (preempted["event"], preempted["step"], preempted["checkpoint"], preempted["by"]) == (
        "preempted",
        12,
        True,
        "ranks",
    )
    assert sup.exit_code == 75


def test_preemption_signal_goes_to_stepping_ranks_only(tmp_path):
    stepping, starting = _sleeper(), _sleeper()
    try:
        sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
        sup._on_preemption_signal(signal.SIGTERM, None)
        sup.tick({0: _beat(0, 3, stepping.pid), 1: _beat(1, 3, starting.pid, phase="fit")}, now=1.0)
        assert stepping.wait(timeout=10) == -signal.SIGTERM
        assert starting.poll() is None
        assert sup.exit_code is None and read_events(tmp_path) == []
    finally:
        stepping.kill()
        starting.kill()


def test_preemption_before_fit_stops_at_once(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    sup._on_preemption_signal(signal.SIGUSR1, None)
    sup.tick({0: _beat(0, 0, os.getpid(), phase="healthy")}, now=1.0)
    (preempted,) = read_events(tmp_path)
    assert (preempted["checkpoint"], preempted["signal"], sup.exit_code) == (False, "SIGUSR1", 75)


def test_resumed_recorded_when_the_restart_finds_nothing_left_to_do(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    me, dead = os.getpid(), _dead_pid()
    sup.tick({0: _beat(0, 30, dead)}, now=1.0)
    sup.tick({0: _beat(0, 30, me, phase="done", attempt=1)}, now=3.0)
    kinds = [e["event"] for e in read_events(tmp_path)]
    assert kinds == ["failure", "restart", "resumed"]


def test_failed_node_local_check_is_left_to_the_node_guard_first(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5), health_defer_s=15.0)
    beats = {0: _beat(0, 0, os.getpid(), phase="start")}
    note = exit_note_for(3, rank=0, attempt=0, step=0, detail="no GPU", check="devices")
    write_exit_note(tmp_path / "heartbeat", note)  # type: ignore[arg-type]
    sup.tick(beats, now=1.0)
    sup.tick(beats, now=15.9)
    assert sup.exit_code is None and read_events(tmp_path) == []
    sup.tick(beats, now=16.1)
    (fatal,) = read_events(tmp_path)
    assert (fatal["event"], fatal["cause"], sup.exit_code) == ("fatal", "health", 3)


def test_an_attempt_that_died_before_its_first_beat_still_counts(tmp_path):
    sup = Supervisor(tmp_path, "L", Progress(k=10, floor=5))
    sup.tick({0: _beat(0, 0, os.getpid(), phase="start", attempt=1)}, now=1.0)
    events = read_events(tmp_path)
    assert [(e["event"], e["attempt"]) for e in events] == [("failure", 0), ("restart", 1)]
    assert events[0]["seen"] is False and sup.failures == 1
