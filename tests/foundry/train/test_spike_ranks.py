"""The spike guard on 2 ranks: a NaN on one rank's half of a batch rolls back every rank (the loss is global),
and the weights equal a 2-rank run whose data lacks that batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.foundry.checkpoint.runs import REPO

WORKER = Path(__file__).with_name("_spike_ranks.py")

pytestmark = pytest.mark.dist


def _run(out: Path, strategy: str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*launch, str(WORKER), str(out), strategy, mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return torch.load(out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_nan_on_one_rank_rolls_back_both_and_equals_the_run_without_the_batch(tmp_path, strategy):
    got = _run(tmp_path / "guard.pt", strategy, "guard")
    ref = _run(tmp_path / "ref.pt", strategy, "ref")
    assert got["skipped"] == [2] and got["step"] == ref["step"] == 5
    for name, p in ref["params"].items():
        assert torch.equal(got["params"][name], p), name
