"""The Trainer on 2 ranks (DDP, FSDP2) with uneven loss tokens per rank equals one process: weights after
3 SGD steps with deferred gradient sync over 2 microbatches and global-norm clipping, and the logged loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.dist_launch import run_ranks

WORKER = Path(__file__).with_name("_trainer_ranks.py")

pytestmark = pytest.mark.dist


def _run(out: Path, strategy: str, nproc: int) -> dict:
    run_ranks(WORKER, out, strategy, nproc=nproc)
    return torch.load(out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_with_uneven_tokens_equal_one_process(tmp_path, strategy):
    ref = _run(tmp_path / "one.pt", "none", 1)
    got = _run(tmp_path / "two.pt", strategy, 2)
    assert got["losses"] == pytest.approx(ref["losses"], abs=1e-6)
    assert got["norms"] == pytest.approx(ref["norms"], rel=1e-5)
    assert ref["norms"][0] > 0.05  # clipping was active
    for name, p in ref["params"].items():
        torch.testing.assert_close(got["params"][name], p, rtol=1e-5, atol=1e-6)
