"""The launcher's events reach the training run's W&B run (a real offline run, read back from its records)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.launch import append_event
from foundry.loggers import WandbConfig
from tests.foundry.checkpoint.runs import REPO, TINY, env_for
from tests.foundry.launch.test_launch_e2e import RUN, STEPS, _finish, _wait_for_step
from tests.foundry.loggers.test_stream_logs import _wandb_records

pytestmark = pytest.mark.slow  # W&B offline runs take several seconds each to start and finish


def wandb_records(run_dir: Path, *, runs: int = 1, timeout: float = 60.0) -> list:
    """Every record of the offline runs under `run_dir`, once `runs` of them hold their final `exit` record."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + timeout
    while True:
        records, exits = [], 0
        for run_file in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
            for payload in _wandb_records(run_file):
                record = pb.Record()
                record.ParseFromString(payload)
                records.append(record)
                exits += record.WhichOneof("record_type") == "exit"
        if exits >= runs or time.monotonic() > deadline:
            return records


def _items(items) -> dict:
    return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in items}


def history(records: list) -> list[dict]:
    return [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]


def summary(records: list) -> dict:
    """The run summary the records leave (later updates win)."""
    out: dict = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            out.update(_items(r.summary.update))
    return out


def test_events_reach_the_wandb_run_and_the_launcher_adds_its_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from foundry.loggers.wandb import LAUNCH_RUN_FILE, WandbLogger, publish_launch_summary

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    append_event(tmp_path, "start", run_name="wb")
    append_event(tmp_path, "failure", cause="exited", rank=1, attempt=0, step=7)
    append_event(tmp_path, "restart", attempt=1)
    log = WandbLogger(WandbConfig(project="test"), run_name="wb", run_dir=tmp_path)  # rank 0 of attempt 1
    run_id = log.run.id  # type: ignore[union-attr]
    assert json.loads((tmp_path / "wandb" / LAUNCH_RUN_FILE).read_text())["id"] == run_id
    log.log_metrics({"train/loss": 2.0}, step=7)
    append_event(tmp_path, "resumed", attempt=1, resumed_step=6, steps_lost=1, time_lost_s=4.5)
    log.log_metrics({"train/loss": 1.5}, step=8)
    log.log_metrics({"train/loss": 1.0}, step=9)
    log.close()
    rows = history(wandb_records(tmp_path))
    assert [(r["_step"], r.get("launch/failures"), r.get("launch/restarts")) for r in rows] == [
        (7, 1.0, 1.0),
        (8, None, None),
        (9, None, None),
    ], "counters in the row of the step at which they changed"
    assert rows[1]["launch/time_lost_s"] == 4.5 and rows[1]["launch/resumed_step"] == 6
    append_event(tmp_path, "summary", ok=True, exit_code=0, failures=1, restarts=1, final_step=9)
    assert publish_launch_summary(tmp_path) == run_id
    records = wandb_records(tmp_path, runs=2)
    got = summary(records)
    assert got["launch/summary"]["failures"] == 1 and got["launch/summary"]["ok"] is True
    assert [e["event"] for e in got["launch/events"]] == ["start", "failure", "restart", "resumed", "summary"]
    assert {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"} == {run_id}


def test_no_wandb_summary_without_a_wandb_run(tmp_path):
    from foundry.loggers.wandb import publish_launch_summary

    append_event(tmp_path, "summary", ok=True)
    assert publish_launch_summary(tmp_path) is None


def test_launcher_events_reach_the_training_runs_wandb_run(tmp_path):
    """kill -9 a rank of a `logger=wandb` run under the launcher: the restarted rank 0 logs the failure and the
    restart into the same (offline) W&B run, and the launcher adds its summary to it at the end."""
    pytest.importorskip("wandb")
    cmd = [
        sys.executable, "-m", "foundry.launch", "--standalone", "--nproc-per-node=2", "--",
        str(REPO / "train.py"), *TINY, *RUN, "logger=wandb", "run_name=wb",
    ]  # fmt: skip
    env = env_for(tmp_path / "cache", OMP_NUM_THREADS="1", WANDB_SILENT="true")  # WANDB_MODE=offline
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    run_dir = tmp_path / "outputs" / "wb"
    os.kill(_wait_for_step(run_dir, 1, 10, proc), signal.SIGKILL)
    _finish(proc)
    records = wandb_records(run_dir, runs=2)  # attempt 1's rank 0 and the launcher (attempt 0's was killed)
    ids = {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"}
    assert len(ids) == 1, "one W&B run: the restart resumes it, the launcher too"
    rows = [r for r in history(records) if "launch/restarts" in r]
    assert rows and rows[-1]["launch/failures"] == 1 and rows[-1]["launch/restarts"] == 1, rows
    assert any(r.get("launch/time_lost_s", 0) > 0 for r in history(records)), "the resumed event's time lost"
    got = summary(records)
    assert got["launch/summary"]["ok"] is True and got["launch/summary"]["final_step"] == STEPS
    kinds = [e["event"] for e in got["launch/events"]]
    assert kinds.count("failure") == 1 and kinds.count("restart") == 1 and kinds[-1] == "summary", kinds


def test_a_wandb_failure_at_the_end_leaves_the_launch_alone(tmp_path, capsys):
    pytest.importorskip("wandb")
    from foundry.loggers.wandb import LAUNCH_RUN_FILE, publish_launch_summary

    (tmp_path / "wandb").mkdir()
    record = {"id": "abc123", "project": "test", "entity": None, "mode": "no-such-mode", "name": "x"}
    (tmp_path / "wandb" / LAUNCH_RUN_FILE).write_text(json.dumps(record))
    append_event(tmp_path, "summary", ok=True)
    assert publish_launch_summary(tmp_path) is None
    assert "could not add the launch summary" in capsys.readouterr().err
