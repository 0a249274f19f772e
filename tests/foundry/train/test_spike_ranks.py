"""The spike guard on 2 ranks: a NaN on one rank's half of a batch rolls back every rank (the loss is global),
and the weights equal a 2-rank run whose data lacks that batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.dist_launch import run_ranks
from tests.train_py import REPO

WORKER = Path(__file__).with_name("_spike_ranks.py")

pytestmark = pytest.mark.dist


def _run(out: Path, strategy: str, mode: str) -> dict:
    run_ranks(WORKER, out, strategy, mode, nproc=2, env={"PYTHONPATH": str(REPO)})
    return torch.load(out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_nan_on_one_rank_rolls_back_both_and_equals_the_run_without_the_batch(tmp_path, strategy):
    got = _run(tmp_path / "guard.pt", strategy, "guard")
    ref = _run(tmp_path / "ref.pt", strategy, "ref")
    assert got["skipped"] == [2] and got["step"] == ref["step"] == 5
    for name, p in ref["params"].items():
        assert torch.equal(got["params"][name], p), name
