"""Per-stream metrics on 2 ranks (DDP) equal one process: eval losses per stream, train counts per stream
(mid-run through the run state, and final), each rank holding half of every batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.dist_launch import run_ranks

WORKER = Path(__file__).with_name("_stream_ranks.py")

pytestmark = pytest.mark.dist


def _run(out: Path, strategy: str, nproc: int) -> dict:
    run_ranks(WORKER, out, strategy, nproc=nproc)
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
