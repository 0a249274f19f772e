"""Node exclusion through `python -m foundry.launch`: two launchers = two nodes of one elastic job.

Each "node" is its own launcher and torchrun agent (`--nnodes=1:2 --nproc-per-node=1`, c10d rendezvous on
127.0.0.1, one --rdzv-id) in its own working directory (its own run dir: events, heartbeats); checkpoints go
to a shared folder, as they would on a shared file system. Node B checks a folder (`--check-url`, its
"mount"). Mid-run the mount disappears and B's rank is killed: on the restart B's store check fails, so B's
launcher leaves the job (a `node_excluded` event, stderr, exit 4) without closing the rendezvous, and A goes
on alone: 1 rank, the same global batch, from the latest checkpoint. The losses of every step equal an
uninterrupted one-process run (elastic resume: within 1e-5, as tests/foundry/checkpoint/test_elastic.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.launch import read_events
from foundry.launch.nodes import NODE_EXCLUDED_EXIT
from tests.foundry.checkpoint.runs import REPO, TINY, env_for, train, train_rows

pytestmark = [pytest.mark.slow, pytest.mark.dist]

STEPS = 15
COMMON = [
    "trainer.global_train_batch_size=8",
    "trainer.device_train_microbatch_size=2",
    "trainer.eval_interval=0",
    "data.num_canonical_nodes=1",
    "scheduler=constant-warmup",
    "scheduler.t_warmup=2ba",
    f"trainer.max_duration={STEPS}ba",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache) -> dict[int, float]:
    cwd = tmp_path_factory.mktemp("ref")
    train([*COMMON, "run_name=ref"], cwd, env_for(cache, OMP_NUM_THREADS="1"))
    return {r["step"]: r["train/loss"] for r in train_rows(cwd / "outputs" / "ref" / "metrics.jsonl")}


def _node(cwd: Path, cache: Path, port: int, ckpt: Path, *options: str) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "foundry.launch", "--max-restarts=5", "--health-timeout=10", "--hang-floor=300",
        "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=nodes-e2e", *options,
        "--", str(REPO / "train.py"), *TINY, *COMMON, "parallelism=ddp", "checkpoint=local",
        f"checkpoint.save_folder={ckpt}", "checkpoint.save_interval=3ba", "run_name=nodes",
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=cwd, env=env_for(cache, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _beat(run_dir: Path, procs: list[subprocess.Popen], at_step: int) -> dict:
    """The beat of the (only) rank of the node at `run_dir` once it shows `at_step`."""
    deadline = time.time() + 400
    while time.time() < deadline:
        for p in procs:
            assert p.poll() is None, p.stdout.read()[-5000:]  # type: ignore[union-attr]
        for path in (run_dir / "heartbeat").glob("rank*.json"):
            try:
                beat = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if beat.get("step", 0) >= at_step:
                return beat
        time.sleep(0.01)
    raise AssertionError(f"no rank under {run_dir} reached step {at_step}")


def test_node_failing_its_check_leaves_and_the_job_continues_on_fewer_ranks(tmp_path, cache, reference):
    port, ckpt, mount = _free_port(), tmp_path / "shared" / "ckpt", tmp_path / "nodeB-mount"
    mount.mkdir()
    conf = "--rdzv-conf=last_call_timeout=3,join_timeout=300"
    a = _node(tmp_path / "nodeA", cache, port, ckpt, conf)  # hosts the rendezvous store
    b = _node(tmp_path / "nodeB", cache, port, ckpt, f"{conf},is_host=false", f"--check-url={mount}")
    try:
        run_a, run_b = tmp_path / "nodeA" / "outputs" / "nodes", tmp_path / "nodeB" / "outputs" / "nodes"
        _beat(run_a, [a, b], 4)
        beat_b = _beat(run_b, [a, b], 4)  # a checkpoint at step 3 exists
        shutil.rmtree(mount)  # node B loses its mount, then its rank dies
        os.kill(beat_b["pid"], signal.SIGKILL)
        out_b, _ = b.communicate(timeout=300)
        out_a, _ = a.communicate(timeout=600)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert b.returncode == NODE_EXCLUDED_EXIT, out_b[-6000:]
    assert "leaves the job: health check 'store' failed" in out_b
    (excluded,) = [e for e in read_events(run_b) if e["event"] == "node_excluded"]
    assert excluded["check"] == "store" and excluded["when"] == "after_start" and excluded["node"]
    assert a.returncode == 0, out_a[-6000:]
    assert "saved by 2 rank(s), now 1" in out_a
    assert (ckpt / f"ep0-ba{STEPS}").exists()
    events_a = read_events(run_a)
    assert events_a[-1]["event"] == "summary" and events_a[-1]["ok"], events_a[-1]
    # every step's loss (rank 0 logs; which node held rank 0 changed) equals the uninterrupted run
    losses: dict[int, float] = {}
    for run in (run_b, run_a):  # A's rows come last: the steps it redid after the resume win
        if (run / "metrics.jsonl").exists():
            losses.update({r["step"]: r["train/loss"] for r in train_rows(run / "metrics.jsonl")})
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert [losses[s] for s in sorted(losses)] == pytest.approx(
        [reference[s] for s in sorted(reference)], abs=1e-5, rel=0
    )


def test_crash_on_one_of_two_nodes_restarts_both_and_continues(tmp_path, cache, reference):
    """kill -9 node B's rank: both nodes restart, re-rendezvous with 2 nodes and finish the same run.

    Issue 16: node B's agent counts the crash as a restart, node A's (restarted for the membership change)
    does not, so TORCHELASTIC_RESTART_COUNT differs between the nodes. Keys built from it (the health
    all-reduce's, the default group's under the shared agent store) never met; the launcher now gives every
    rendezvous round a fresh store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), whose keys need no attempt.
    """
    port, ckpt = _free_port(), tmp_path / "shared" / "ckpt"
    conf = "--rdzv-conf=last_call_timeout=3,join_timeout=300"
    a = _node(tmp_path / "nodeA", cache, port, ckpt, conf)
    b = _node(tmp_path / "nodeB", cache, port, ckpt, f"{conf},is_host=false")
    try:
        run_a, run_b = tmp_path / "nodeA" / "outputs" / "nodes", tmp_path / "nodeB" / "outputs" / "nodes"
        _beat(run_a, [a, b], 4)
        os.kill(_beat(run_b, [a, b], 4)["pid"], signal.SIGKILL)
        out_b, _ = b.communicate(timeout=400)
        out_a, _ = a.communicate(timeout=400)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert a.returncode == 0 and b.returncode == 0, out_a[-3000:] + out_b[-3000:]
    events = {run: read_events(run) for run in (run_a, run_b)}
    # no restart cycle lost: one failed attempt on B, then both nodes pass the health all-reduce at once
    # (each node's rank checked twice), although the nodes' restart counts now differ (A: 0, B: 1)
    for run, evs in events.items():
        health = [e for e in evs if e["event"] == "health"]
        assert [e["ok"] for e in health] == [True, True], (run, health)
    assert events[run_b][-1]["restarts"] == 1, events[run_b][-1]
    losses: dict[int, float] = {}
    for run in (run_a, run_b):
        if (run / "metrics.jsonl").exists():
            losses.update({r["step"]: r["train/loss"] for r in train_rows(run / "metrics.jsonl")})
    assert [losses[s] for s in sorted(losses)] == pytest.approx(
        [reference[s] for s in sorted(reference)], abs=1e-5, rel=0
    )
