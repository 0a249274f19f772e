"""`train.py task=eval` (run in-process through Hydra compose): offline tasks on mpt-tiny, a checkpoint
written by the trainer, and ICL metrics logged during training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs
from foundry.tasks import run_task

CONF = Path(__file__).resolve().parents[3] / "conf"
TINY = ["data.corpus_mb=0.15", "data.vocab_size=300", "eval.limit=6"]


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("RUN_NAME", raising=False)
    register_configs()

    def _run(overrides: list[str]) -> Path:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            run_task(compose("train", overrides=overrides))
        return tmp_path / "outputs" / "dev"

    return _run


def test_task_eval_on_the_offline_tasks(run):
    out = run(["task=eval", "model=mpt-tiny", "eval=offline", *TINY])
    final = json.loads((out / "final_metrics.json").read_text())
    assert "icl/arithmetic_mc/3-shot/acc" in final and "icl/dyck/3-shot/InContextLearningLMAccuracy" in final
    for name in (
        "eval_results.json",
        "icl_results.json",
        "icl_results.md",
        "icl_examples/repeat_copy_3shot.jsonl",
    ):
        assert (out / name).is_file(), name


def test_task_eval_without_tasks_says_what_to_pass(run):
    with pytest.raises(ValueError, match="eval=offline"):
        run(["task=eval", "model=mpt-tiny", "data.corpus_mb=0.15", "data.vocab_size=300"])


@pytest.mark.slow
def test_pretrain_logs_icl_metrics_and_its_checkpoint_evaluates(run, tmp_path):
    out = run(["experiment=smoke-cpu", "trainer.max_duration=2ba", "eval=offline", "checkpoint=local",
               "checkpoint.save_interval=2ba", "run_name=ck", *TINY])  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    icl = [r for r in rows if "icl/arithmetic_mc/3-shot/acc" in r]
    assert icl and "icl/seconds" in icl[-1]
    ckpts = out / "checkpoints"  # checkpoint=local saves under the run directory
    assert ckpts.is_dir(), sorted(p.name for p in out.iterdir())

    def logprobs(out: Path) -> list[list[float]]:
        lines = (out / "icl_examples" / "arithmetic_mc_3shot.jsonl").read_text().splitlines()
        return [json.loads(line)["choice_logprobs"] for line in lines]

    trained = logprobs(
        run(["task=eval", "model=mpt-tiny", "eval=offline", f"checkpoint.load_path={ckpts}", *TINY])
    )
    fresh = logprobs(run(["task=eval", "model=mpt-tiny", "eval=offline", *TINY]))
    assert len(trained) == 6 and trained != fresh  # the checkpoint's weights were evaluated


@pytest.mark.slow
def test_gauntlet_v03_on_the_shared_mirror(run, shared_data, neox_tokenizer_path, monkeypatch):
    if not (shared_data / "icl").is_dir() or not neox_tokenizer_path.is_file():
        pytest.skip("needs ../shared/data/icl and the gpt-neox-20b tokenizer")
    monkeypatch.setenv("EVAL_DATA", str(shared_data / "icl"))
    out = run(["task=eval", "model=mpt-tiny", "model.vocab_size=50304", "model.max_seq_len=2048",
               f"tokenizer.name={neox_tokenizer_path}", "eval=gauntlet-v0.3", "eval.limit=3"])  # fmt: skip
    doc = json.loads((out / "icl_results.json").read_text())
    assert {"hellaswag", "squad"} <= {s.split("'")[1] for s in doc["skipped"]}  # absent: skipped by name
    assert "gsm8k/0-shot" in doc["tasks"] and "winogrande/5-shot" in doc["tasks"]
    assert doc["gauntlet"]["partial"]["averages"]["core_average"] is not None
    assert "## Eval Gauntlet" in (out / "icl_results.md").read_text()
