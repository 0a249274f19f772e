"""The README's first hour: the quick start leaves one final checkpoint in its run directory, a rerun of the
finished run says so, `scripts/export_hf.py` exports it, and `task=eval` (make eval) reports which checkpoint it
evaluated; the quick-start data build shows progress in train.log."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.loggers import read_metrics
from foundry.tasks.pretrain import pretrain
from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
TINY = ["data.corpus_mb=0.15", "data.vocab_size=300"]
SHORT = ["trainer.max_duration=2ba", "trainer.eval_subset_num_batches=1", "trainer.progress_bar=false"]


def _cfg(cache: Path, *overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=[f"data.local={cache}", *TINY, *overrides])
    return to_train_config(cfg)


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> Path:
    """A 2-step quick start with the default config groups (so the default checkpoint config)."""
    root = tmp_path_factory.mktemp("first-hour")
    run_dir = root / "outputs" / "quickstart"
    pretrain(_cfg(root / "cache", "trainer.global_train_batch_size=4", *SHORT), run_dir=run_dir)
    return run_dir


def _export_script():
    spec = importlib.util.spec_from_file_location("export_hf_script", REPO / "scripts" / "export_hf.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_quick_start_leaves_one_final_checkpoint_in_its_run_dir(quickstart_run):
    ckpts = quickstart_run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.is_dir()) == ["ep0-ba2"]
    manifest = json.loads((ckpts / "ep0-ba2" / "manifest.json").read_text())
    assert manifest["step"] == 2 and not manifest["weights_only"]
    run = json.loads((quickstart_run / "run.json").read_text())
    assert run["config"]["checkpoint"]["save_folder"] == str(ckpts)  # {run_dir} expanded


def test_sweep_jobs_get_their_own_checkpoint_folder(tmp_path):
    from foundry.tasks.pretrain import _expand_run_dir

    cfg = _cfg(tmp_path / "cache")
    assert cfg.checkpoint.save_folder == "{run_dir}/checkpoints"
    jobs = [tmp_path / "multirun" / "grid" / f"{i}_optimizer.lr={lr}" for i, lr in enumerate((1e-3, 3e-4))]
    folders = {_expand_run_dir(cfg, job).checkpoint.save_folder for job in jobs}
    assert folders == {f"{job}/checkpoints" for job in jobs}


def test_a_rerun_of_the_finished_run_says_so_and_trains_nothing(quickstart_run, capsys):
    cfg = _cfg(quickstart_run.parents[1] / "cache", "trainer.global_train_batch_size=4", *SHORT)
    before = read_metrics(quickstart_run / "metrics.jsonl")
    metrics = pretrain(cfg, run_dir=quickstart_run)
    out = capsys.readouterr().out
    assert "already finished" in out and "step 2 of max_duration 2ba" in out and "make clean" in out
    after = read_metrics(quickstart_run / "metrics.jsonl")
    new_train = [r for r in after[len(before) :] if "train/loss" in r]
    assert new_train == [] and metrics["eval/loss"] > 0


@pytest.mark.parametrize("which", ["save folder", "checkpoint folder", "sharded checkpoint"])
def test_export_hf_takes_trainer_checkpoints(quickstart_run, tmp_path, which):
    from foundry.checkpoint.convert import convert_checkpoint
    from foundry.models import load_pretrained

    ckpts = quickstart_run / "checkpoints"
    src = {"save folder": ckpts, "checkpoint folder": ckpts / "ep0-ba2"}.get(which)
    if src is None:  # a sharded copy, inside a run directory of its own
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "run.json").write_text((quickstart_run / "run.json").read_text())
        src = Path(
            convert_checkpoint(str(ckpts), str(tmp_path / "run" / "checkpoints" / "ep0-ba2"), to="sharded")
        )
    _export_script().main(["--src", str(src), "--out", str(tmp_path / "hf")])
    model = load_pretrained(tmp_path / "hf")
    weights = torch.load(ckpts / "ep0-ba2" / "model.pt", weights_only=True)
    key = "transformer.wte.weight"
    assert torch.equal(model.state_dict()[key], weights[key])
    assert (tmp_path / "hf" / "tokenizer.json").is_file()  # the run's tokenizer, from its run.json


def _train_py(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = run_train_py(args, cwd)
    assert "Traceback" not in proc.stderr
    return proc


@pytest.mark.slow
def test_train_then_eval_evaluates_the_trained_checkpoint(tmp_path):
    """`make train` then `make eval` in miniature (the same train.py commands, shorter)."""
    # make train
    _train_py(["run_name=quickstart", *TINY, *SHORT, "trainer.global_train_batch_size=4"], tmp_path)
    log = (tmp_path / "outputs" / "quickstart" / "train.log").read_text()
    assert "quick start: building the corpus" in log and "MDS split 'train'" in log and "data ready" in log
    ckpts = tmp_path / "outputs" / "quickstart" / "checkpoints"
    assert (ckpts / "ep0-ba2" / "manifest.json").is_file()
    proc = _train_py(
        [
            "task=eval",
            "model=mpt-tiny",
            "eval=offline",
            "eval.limit=4",
            "run_name=eval",
            "checkpoint.load_path=outputs/quickstart/checkpoints",
            *TINY,
        ],  # fmt: skip
        tmp_path,
    )
    assert "evaluating checkpoint outputs/quickstart/checkpoints/ep0-ba2 (step 2)" in proc.stdout
