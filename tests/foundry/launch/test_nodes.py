"""Node exclusion pieces: which failed check excludes a node, the pre-join check, the guard on a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from foundry.launch import append_event, read_events
from foundry.launch.cli import main
from foundry.launch.nodes import (
    NODE_EXCLUDED_EXIT,
    NodeGuard,
    check_node,
    elastic_nodes,
    node_failure,
    stop_agent,
)
from foundry.launch.worker import WorkerSettings


def _health(ok: bool, check: str = "", launch_id: str = "me", **extra: object) -> dict:
    return {"event": "health", "ok": ok, "check": check, "launch_id": launch_id, "rank": 1, **extra}


def _append(run_dir, record: dict) -> None:
    append_event(run_dir, record.pop("event"), **record)


def test_only_our_node_local_failures_exclude_the_node():
    assert node_failure([_health(True)], "me") is None
    assert node_failure([_health(False, "all_reduce")], "me") is None, "a collective names no culprit"
    assert node_failure([_health(False, "store", launch_id="other")], "me") is None, "another node's rank"
    assert node_failure([{"event": "failure", "cause": "exited"}], "me") is None
    events = [_health(True), _health(False, "disk", detail="d"), _health(False, "store")]
    assert node_failure(events, "me") == events[1]
    for check in ("devices", "disk", "store"):
        assert node_failure([_health(False, check)], "me") is not None


def test_exclusion_only_for_an_elastic_node_range():
    assert elastic_nodes(["--nnodes=1:2", "--nproc-per-node=1"])
    assert elastic_nodes(["--nnodes", "2:4"])
    assert not elastic_nodes(["--nnodes=2"]), "a fixed size cannot go on without the node"
    assert (
        not elastic_nodes(["--nnodes=2:2"]) and not elastic_nodes(["--standalone"]) and not elastic_nodes([])
    )
    assert not elastic_nodes(["--nnodes=a:b"])


def test_check_node_names_the_failing_check(tmp_path):
    ok = WorkerSettings(
        run_dir=str(tmp_path / "run"), launch_id="x", min_free_gb=0.0, check_urls=[str(tmp_path)]
    )
    assert check_node(ok) is None
    gone = WorkerSettings(run_dir=str(tmp_path / "run"), launch_id="x", min_free_gb=0.0,
                          check_urls=[str(tmp_path / "missing")])  # fmt: skip
    bad = check_node(gone)
    assert bad is not None and bad.check == "store" and "missing" in bad.detail
    full = WorkerSettings(run_dir=str(tmp_path / "run"), launch_id="x", min_free_gb=1e9)
    bad = check_node(full)
    assert bad is not None and bad.check == "disk"


def test_launcher_with_a_failing_node_check_does_not_join(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").touch()  # the launcher refuses a script that does not exist
    rc = main(["--min-free-gb=1e9", "--nnodes=1:2", "--", "train.py", "run_name=r"])
    assert rc == NODE_EXCLUDED_EXIT
    events = read_events(tmp_path / "outputs" / "r")
    assert [e["event"] for e in events] == ["start", "node_excluded"], "torchrun never started"
    assert events[1]["check"] == "disk" and events[1]["when"] == "before_join" and events[1]["node"]
    assert "leaves the job: health check 'disk' failed" in capsys.readouterr().err


def test_one_node_run_is_not_excluded_before_joining(tmp_path, monkeypatch):
    """Without --nnodes=MIN:MAX the workers' own checks decide (the launcher starts torchrun as before)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").touch()
    monkeypatch.setattr(subprocess, "Popen", _refuse)  # stands in for torchrun: only "was it started"
    with pytest.raises(RuntimeError, match="torchrun started"):
        main(["--min-free-gb=1e9", "--standalone", "--", "train.py", "run_name=r"])
    assert "node_excluded" not in [e["event"] for e in read_events(tmp_path / "outputs" / "r")]


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("torchrun started")


def test_guard_stops_the_agent_on_our_failed_check(tmp_path):
    # default SIGHUP even under `nohup` (torchrun, which it stands in for, installs its own handler)
    default_sighup = lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=default_sighup)
    guard = NodeGuard(tmp_path, "me", proc, poll_s=0.01).start()
    _append(tmp_path, _health(False, "all_reduce"))
    _append(tmp_path, _health(False, "store", launch_id="other"))
    time.sleep(0.2)
    assert proc.poll() is None and guard.excluded is None
    _append(tmp_path, _health(False, "store", detail="gone"))
    proc.wait(timeout=10)
    guard.stop()
    assert guard.excluded is not None and guard.excluded["check"] == "store"
    assert guard.excluded["detail"] == "gone" and guard.excluded["when"] == "after_start"


def test_stop_agent_falls_back_to_sigkill_when_signals_are_ignored():
    code = (
        "import signal, time; [signal.signal(s, signal.SIG_IGN) for s in (1, 2)]; print(1, flush=True); "
        "time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()  # handlers installed
    t0 = time.monotonic()
    stop_agent(proc, grace_s=0.4)
    assert proc.returncode == -9 and time.monotonic() - t0 < 30  # not the child's 60 s sleep
