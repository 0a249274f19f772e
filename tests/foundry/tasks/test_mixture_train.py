"""`train.py data=mpt-7b-mix` end to end on offline stand-in streams: each documented command-line form trains
3 steps; a mid-epoch resume continues the same batches (1 process, and `torchrun` 2 ranks x 2 workers); a resume
with a reweighted mixture and `data.on_mixture_change=continue` gives the same losses on 1 and 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundry.data.standin import read_stream_layouts, write_standin_streams
from tests.dist_launch import run_ranks
from tests.train_py import REPO, run_train_py

STREAMS = REPO / "conf" / "data" / "streams"


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("standin-mix")
    write_standin_streams(root, layouts=read_stream_layouts(STREAMS), samples=64, eval_samples=8, seq_len=128)
    return root


def _common(root: Path) -> list[str]:
    return [
        "data=mpt-7b-mix",
        f"data.local_root={root}",
        "data.remote_root=null",
        "data.num_workers=0",
        "data.num_canonical_nodes=2",
        "model=mpt-tiny",
        "tokenizer=none",
        "trainer=cpu",
        "trainer.global_train_batch_size=8",
        "scheduler=constant-warmup",
        "scheduler.t_warmup=2ba",
    ]


def _final(cwd: Path, run: str) -> dict:
    return json.loads((cwd / "outputs" / run / "final_metrics.json").read_text())


def _losses(cwd: Path, run: str) -> dict[int, float]:
    rows = map(json.loads, (cwd / "outputs" / run / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("form", "stream"),
    [
        ([], "c4"),
        (["data.streams.c4.proportion=0.5"], "c4"),
        (["+data/streams@data.streams.code=the-stack", "data.streams.code.proportion=0.05"], "code"),
        (["~data.streams.arxiv"], "c4"),
    ],
    ids=["as-is", "change", "add", "drop"],
)
def test_each_documented_form_trains_3_steps(tmp_path, standin, form, stream):
    run_train_py([*_common(standin), *form, "trainer.max_duration=3ba", "run_name=mix"], tmp_path)
    final = _final(tmp_path, "mix")
    assert final["eval/loss"] > 0 and "eval/c4/loss" in final and "eval/mc4/loss" in final
    assert f"train/{stream}/samples" in final
    if form == ["~data.streams.arxiv"]:
        assert "train/arxiv/samples" not in final


def _torchrun(args: list[str], cwd: Path, nproc: int) -> None:
    if nproc == 1:
        run_train_py(args, cwd, env={"OMP_NUM_THREADS": "1"})
        return
    env = {"FOUNDRY_CACHE": str(cwd / "cache"), "WANDB_MODE": "offline"}
    run_ranks(REPO / "train.py", *args, nproc=nproc, env=env, cwd=cwd, timeout=600)


def _resume_case(root: Path, cwd: Path, *, nproc: int, workers: int, second: list[str]) -> dict[int, float]:
    """3 steps (checkpoint at 3) on `nproc` ranks, then autoresume to 6 with `second` overrides."""
    cwd.mkdir(parents=True, exist_ok=True)
    args = [*_common(root), f"data.num_workers={workers}", "checkpoint=local", "checkpoint.save_interval=3ba"]
    if nproc > 1:
        args.append("parallelism=ddp")
    _torchrun([*args, "trainer.max_duration=3ba", "run_name=r"], cwd, nproc)
    _torchrun([*args, *second, "trainer.max_duration=6ba", "run_name=r"], cwd, nproc)
    return _losses(cwd, "r")


@pytest.mark.slow
def test_mid_epoch_resume_with_a_mixture_matches_the_uninterrupted_run(tmp_path, standin):
    (tmp_path / "a").mkdir()
    run_train_py([*_common(standin), "trainer.max_duration=6ba", "run_name=full"], tmp_path / "a")
    full = _losses(tmp_path / "a", "full")
    resumed = _resume_case(standin, tmp_path / "b", nproc=1, workers=0, second=[])
    assert [round(resumed[s], 5) for s in (4, 5, 6)] == [round(full[s], 5) for s in (4, 5, 6)]


REWEIGHT = ["data.streams.c4.proportion=0.6", "~data.streams.arxiv", "data.on_mixture_change=continue"]


@pytest.mark.slow
def test_changed_mixture_errors_unless_continue(tmp_path, standin):
    args = [*_common(standin), "checkpoint=local", "checkpoint.save_interval=3ba", "run_name=r"]
    run_train_py([*args, "trainer.max_duration=3ba"], tmp_path)
    proc = run_train_py([*args, "trainer.max_duration=6ba", "~data.streams.arxiv"], tmp_path, ok=False)
    err = proc.stdout + proc.stderr
    assert "redpajama/arxiv/train removed" in err and "data.on_mixture_change=continue" in err
    run_train_py([*args, "trainer.max_duration=6ba", *REWEIGHT], tmp_path)
    assert set(_losses(tmp_path, "r")) >= {4, 5, 6}


@pytest.mark.dist
def test_mixture_resume_is_the_same_on_1_and_2_ranks_with_2_workers(tmp_path, standin):
    one = _resume_case(standin, tmp_path / "one", nproc=1, workers=2, second=[])
    two = _resume_case(standin, tmp_path / "two", nproc=2, workers=2, second=[])
    assert [round(two[s], 5) for s in range(1, 7)] == [round(one[s], 5) for s in range(1, 7)]


def _stream_samples(cwd: Path) -> dict[str, float]:
    return {k: v for k, v in _final(cwd, "r").items() if k.startswith("train/") and k.endswith("/samples")}


@pytest.mark.dist
def test_mixture_continue_is_the_same_on_1_and_2_ranks_with_2_workers(tmp_path, standin):
    one_c = _resume_case(standin, tmp_path / "one_c", nproc=1, workers=2, second=REWEIGHT)
    two_c = _resume_case(standin, tmp_path / "two_c", nproc=2, workers=2, second=REWEIGHT)
    assert [round(two_c[s], 5) for s in range(1, 7)] == [round(one_c[s], 5) for s in range(1, 7)]
    counts = _stream_samples(tmp_path / "one_c")  # the same samples per stream: the same batches' streams
    assert counts == _stream_samples(tmp_path / "two_c") and counts["train/c4/samples"] > 0
