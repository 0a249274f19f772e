"""`train.py` as users run it: a 3-step smoke run, the offline quick start, multirun summaries (also of failed
sweeps), Optuna."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[1]


def _train(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return run_train_py(args, cwd, timeout=timeout)


TINY = ["data.corpus_mb=0.15", "data.vocab_size=300"]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_smoke_three_steps(tmp_path):
    proc = _train(["experiment=smoke-cpu", "trainer.max_duration=3ba", "run_name=smoke", *TINY], tmp_path)
    run_dir = tmp_path / "outputs" / "smoke"
    assert f"run directory: {run_dir}" in proc.stdout
    assert [r["step"] for r in _metrics(run_dir) if "train/loss" in r] == [1, 2, 3]
    for name in ("config.yaml", "run.json", "final_metrics.json", ".hydra/rank0/config.yaml"):
        assert (run_dir / name).is_file(), name
    # transformers >= 5.24 logs "`past_key_values`/`cache_params` are deprecated" once a process uses the old name
    assert "deprecated" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_quickstart_with_no_overrides_trains_and_the_loss_falls(tmp_path):
    proc = _train(["run_name=quickstart"], tmp_path, timeout=900)  # make train
    run_dir = tmp_path / "outputs" / "quickstart"
    assert f"run directory: {run_dir}" in proc.stdout
    rows = _metrics(run_dir)
    train = [r["train/loss"] for r in rows if "train/loss" in r]
    evals = [r["eval/loss"] for r in rows if "eval/loss" in r]
    assert len(train) == 600 and len(evals) == 6
    assert evals[-1] < train[0] - 2.0 and evals == sorted(evals, reverse=True)
    assert len(list((tmp_path / "cache" / "quickstart").glob("tokenizer-*/tokenizer.json"))) == 1


@pytest.mark.slow
def test_multirun_runs_each_job_in_its_own_dir_and_prints_a_summary(tmp_path):
    args = [
        "-m",
        "experiment=smoke-cpu",
        "optimizer.lr=1e-3,3e-4",
        "run_name=grid",
        "checkpoint=local",
        *TINY,
    ]
    proc = _train(args, tmp_path)
    sweep = tmp_path / "outputs" / "multirun" / "grid"
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2 and all((j / "final_metrics.json").is_file() for j in jobs)
    for job in jobs:  # each job checkpoints into its own folder (a shared one made job 1 resume job 0's end)
        assert any((job / "checkpoints").iterdir()), job
        assert any("train/loss" in r for r in _metrics(job)), job
    assert "multirun summary (2 jobs, 0 failed)" in proc.stdout
    (summary,) = sweep.glob("summary-*.md")  # one file per sweep: sweeps sharing a run_name keep theirs
    table = summary.read_text()
    assert (
        "| optimizer.lr=0.001 |" in table and "| optimizer.lr=0.0003 |" in table
    )  # shared overrides dropped


def test_a_sweep_whose_jobs_fail_still_prints_its_summary_and_exits_non_zero(tmp_path):
    env = {**os.environ, "FOUNDRY_CACHE": str(tmp_path / "cache")}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "-m", "task=finetune,bogus", "run_name=broken"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "error: task=finetune trains on prompt/response" in proc.stderr and "Traceback" not in proc.stderr
    assert "multirun summary (2 jobs, 2 failed)" in proc.stdout, proc.stdout[-3000:]
    (summary,) = (tmp_path / "outputs" / "multirun" / "broken").glob("summary-*.md")
    rows = [line for line in summary.read_text().splitlines() if "failed: ConfigError" in line]
    assert len(rows) == 2 and "| task=bogus |" in rows[1]


@pytest.mark.slow
def test_optuna_sweep_runs_a_few_trials(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    _train(
        ["sweep=optuna-lr", "experiment=smoke-cpu", "hydra.sweeper.n_trials=3", "trainer.max_duration=3ba",
         "trainer.eval_interval=0", *TINY],
        tmp_path,
    )  # fmt: skip
    results = (
        tmp_path / "outputs" / "multirun" / "sweep-optuna-lr" / "optimization_results.yaml"
    ).read_text()
    assert "best_params" in results and "optimizer.lr" in results


@pytest.mark.slow
def test_wandb_offline_logger_from_the_command_line(tmp_path):
    pytest.importorskip("wandb")
    _train(["experiment=smoke-cpu", "logger=wandb", "run_name=wb", *TINY], tmp_path)
    runs = list((tmp_path / "outputs" / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
