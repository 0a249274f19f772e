"""Two Slurm "nodes" on one machine: the per-node commands `NodeRunner` builds from SLURM_* (c10d on the first
node of SLURM_JOB_NODELIST) start two launchers of one rank each, which meet in one 2-rank world and train to
the end. The nodes share the working directory, as a shared filesystem would. (The run is not compared with a
1-node x 2-rank torchrun run: the sample partition depends on the node count, so the losses differ.)"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from foundry.launch import read_events
from foundry.launch.slurm import NodeCommandConfig, NodeRunner
from tests.foundry.checkpoint.runs import REPO, TINY, env_for, train_rows

pytestmark = pytest.mark.dist

STEPS = 8
RUN = [f"trainer.max_duration={STEPS}ba", "trainer.eval_interval=0", "checkpoint=local", "parallelism=ddp"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_meet_through_the_rendezvous_read_from_slurm_env(tmp_path):
    env = env_for(tmp_path / "cache", OMP_NUM_THREADS="1")

    node = NodeCommandConfig(launcher_args=["--max-restarts=0"], nproc_per_node=1, rdzv_port=_free_port())
    runner = NodeRunner(node=node, local=False)
    runner.bind(str(tmp_path), str(REPO / "train.py"), [[*TINY, *RUN]], "two", 0)
    procs = []
    for rank in (0, 1):
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": str(rank),
                 "SLURM_JOB_NODELIST": "127.0.0.1,127.0.0.1"}  # fmt: skip
        cmd, name = runner.command([*TINY, *RUN], 0, slurm)
        assert name == "two" and f"--rdzv-endpoint=127.0.0.1:{node.rdzv_port}" in cmd
        procs.append(subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-4000:] for o in outs)

    run_dir = tmp_path / "outputs" / "two"
    events = read_events(run_dir)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2 and all("--rdzv-id=4242" in e["torchrun_options"] for e in starts)
    assert sorted(e["rank"] for e in events if e["event"] == "health") == [0, 1]
    assert json.loads((run_dir / "run.json").read_text())["derived"]["world_size"] == 2
    assert [r["step"] for r in train_rows(run_dir / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert (run_dir / "checkpoints" / f"ep0-ba{STEPS}" / "manifest.json").exists()
