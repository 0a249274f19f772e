"""FSDP2 with FP8 (issue 30): the converted weights are all-gathered in FP8 and training follows one process.

torchao comes from `.cache/fp8` (`make install`), as in tests/foundry/train/test_float8.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from tests.dist_launch import run_ranks

WORKER = Path(__file__).with_name("_float8_ranks.py")
_spec = importlib.util.spec_from_file_location("_float8_ranks", WORKER)
assert _spec is not None and _spec.loader is not None
ranks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ranks)  # the worker's `train`, run in this process too
FP8_SITE = ranks.FP8_SITE


@pytest.fixture(autouse=True)
def _torchao(monkeypatch):
    if not (FP8_SITE / "torchao").is_dir():
        pytest.fail(
            f"torchao is not in {FP8_SITE}: run `make install` (it installs torchao there for these tests)"
        )
    monkeypatch.syspath_prepend(str(FP8_SITE))


def _run(out: Path, strategy: str, *, all_gather: bool, nproc: int = 1) -> dict:
    run_ranks(WORKER, out, strategy, "1" if all_gather else "0", nproc=nproc)
    return torch.load(out)


def test_one_rank_fsdp_all_gathers_fp8_weights_and_follows_one_process():
    """In this process: a 1-rank group runs every code path of the FP8 all-gather."""
    ref = ranks.train("none", False, env={})
    got = ranks.train("fsdp", True, env={})
    assert got["weight_type"] == "WeightWithDynamicFloat8CastTensor"  # FSDP's pre-all-gather casts it to FP8
    assert ref["losses"][-1] < ref["losses"][0] - 0.5  # it learns
    assert got["losses"] == pytest.approx(ref["losses"], rel=1e-2)


@pytest.mark.dist
def test_two_ranks_fsdp_fp8_all_gather_follows_one_process(tmp_path):
    ref = _run(tmp_path / "ref.pt", "none", all_gather=False)
    got = _run(tmp_path / "two.pt", "fsdp", all_gather=True, nproc=2)
    assert got["weight_type"] == "WeightWithDynamicFloat8CastTensor"
    assert got["losses"] == pytest.approx(ref["losses"], rel=2e-2)
