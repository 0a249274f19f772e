"""Per-stream metrics on 2 ranks (DDP) equal one process: eval losses per stream, train counts per stream
(mid-run through the run state, and final), each rank holding half of every batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("_stream_ranks.py")

pytestmark = pytest.mark.dist


def _run(out: Path, strategy: str, nproc: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env["OMP_NUM_THREADS"] = "1"
    launch = [sys.executable]
    if nproc > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    proc = subprocess.run(
        [*launch, str(WORKER), str(out), strategy], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return torch.load(out)


def test_two_ranks_sum_per_stream_metrics_like_one_process(tmp_path):
    ref = _run(tmp_path / "one.pt", "none", 1)
    got = _run(tmp_path / "two.pt", "ddp", 2)
    assert got["mid"] == ref["mid"] and sum(c["samples"] for c in ref["mid"].values()) == 16
    counts = {k: v for k, v in ref["final"].items() if k.endswith(("/samples", "/tokens"))}
    assert len(counts) == 6 and {k: got["final"][k] for k in counts} == counts
    per_stream = [k for k in ref["final"] if k.startswith("eval/") and k.count("/") == 2]
    assert len(per_stream) == 6
    for key in ["eval/loss", *per_stream]:
        assert got["final"][key] == pytest.approx(ref["final"][key], rel=1e-5), key
