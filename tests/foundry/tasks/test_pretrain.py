"""`pretrain` end to end in-process on a tiny quick-start corpus: a 3-step smoke run and its run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.loggers import read_metrics
from foundry.tasks.pretrain import pretrain

CONF = Path(__file__).resolve().parents[3] / "conf"


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("qs") / "quickstart")


def _cfg(tiny_data: str, *overrides: str, experiment: str = "smoke-cpu"):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(
            "train",
            overrides=[
                f"experiment={experiment}",
                f"data.local={tiny_data}",
                "data.corpus_mb=0.15",
                "data.vocab_size=300",
                *overrides,
            ],
        )
    return to_train_config(cfg)


def test_smoke_three_steps_writes_a_self_describing_run_dir(tiny_data, tmp_path):
    cfg = _cfg(tiny_data, "trainer.max_duration=3ba", "trainer.eval_interval=2ba")
    metrics = pretrain(cfg, run_dir=tmp_path)
    assert metrics["eval/loss"] > 0 and metrics["train/loss"] > 0
    rows = read_metrics(tmp_path / "metrics.jsonl")
    train_steps = [r["step"] for r in rows if "train/loss" in r]
    assert train_steps == [1, 2, 3]
    assert [r["step"] for r in rows if "eval/loss" in r] == [2, 3]
    assert "lr-DecoupledAdamW/group0" in rows[0] and "throughput/tokens_per_sec" in rows[0]
    run = json.loads((tmp_path / "run.json").read_text())
    derived = run["derived"]
    assert derived["tokens_per_step"] == 4 * 128 and derived["max_steps"] == 3
    assert derived["microbatches_per_step"] == 2 and derived["precision"] == "fp32"
    assert run["config"]["model"]["d_model"] == 64
    assert "torch" in run["packages"] and "sha" in run["git"]


def test_token_duration_rounds_up_to_whole_steps(tiny_data, tmp_path):
    cfg = _cfg(tiny_data, "trainer.max_duration=1000tok", "trainer.eval_interval=0")
    pretrain(cfg, run_dir=tmp_path)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["derived"]["max_steps"] == 2  # 1000 tokens / 512 per step


def test_vocab_larger_than_the_model_is_a_clear_error(tiny_data, tmp_path):
    cfg = _cfg(tiny_data, "model.vocab_size=256")
    with pytest.raises(ValueError, match="model.vocab_size"):
        pretrain(cfg, run_dir=tmp_path)


def test_c4_absent_says_how_to_create_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_DATA", str(tmp_path))
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = to_train_config(compose("train", overrides=["data=c4", "tokenizer.name=/nonexistent/tok.json"]))
    with pytest.raises(FileNotFoundError) as info:
        pretrain(cfg, run_dir=tmp_path / "run")
    msg = str(info.value)
    assert "convert_dataset_hf.py --dataset allenai/c4" in msg and f"--out {tmp_path}/c4" in msg


EXPERIMENTS = sorted(
    p.stem for p in (CONF / "experiment").glob("*.yaml") if "\ntask: finetune" not in p.read_text()
)  # finetuning recipes: tests/foundry/tasks/test_finetune.py
TINY_RUN = [
    "model=mpt-tiny",
    "data=quickstart",
    "trainer.device=cpu",
    "trainer.precision=fp32",
    "trainer.max_duration=1ba",
    "trainer.global_train_batch_size=2",
    "trainer.device_train_microbatch_size=1",
    "trainer.device_eval_batch_size=2",
    "trainer.eval_subset_num_batches=1",
    "trainer.progress_bar=false",
    "scheduler.t_warmup=0ba",
]


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs_one_step_at_tiny_size(experiment, tiny_data, tmp_path, monkeypatch):
    monkeypatch.chdir(
        tmp_path
    )  # experiments save checkpoints under ./outputs/<run_name> (and would autoresume)
    cfg = _cfg(tiny_data, *TINY_RUN, experiment=experiment)
    if experiment != "smoke-cpu":
        assert cfg.trainer.max_duration == "1ba" and cfg.tags[0] == experiment.removesuffix("-c4")
    metrics = pretrain(cfg, run_dir=tmp_path)
    assert metrics["train/loss"] > 0
