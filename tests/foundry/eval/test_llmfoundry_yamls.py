"""llm-foundry's own ICL task lists and Eval Gauntlet YAMLs (its `scripts/eval/yamls/`, copied unmodified to
shared/data/llmfoundry_eval_yamls; skipped when absent) load unchanged through `eval.icl_tasks_file` /
`eval.icl_tasks=PATH` and `eval.gauntlet`, and `train.py task=eval` runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from foundry.compat.llmfoundry import expand_train_args
from foundry.eval.config import EvalConfig, load_task_configs
from foundry.eval.data import resolve_local
from foundry.eval.gauntlet import compute_gauntlet, gauntlet_config

REPO = Path(__file__).resolve().parents[3]
LF = REPO.parent / "shared" / "data" / "llmfoundry_eval_yamls"
ALL = sorted(LF.glob("*.y*ml")) if LF.is_dir() else []
TASK_FILES = [p for p in ALL if isinstance((yaml.safe_load(p.read_text()) or {}).get("icl_tasks"), list)]
GAUNTLETS = [p for p in ALL if isinstance((yaml.safe_load(p.read_text()) or {}).get("eval_gauntlet"), dict)]
needs = pytest.mark.skipif(not ALL, reason=f"llm-foundry eval YAMLs not found at {LF}")


@needs
def test_the_fixtures_are_there():
    names = {p.name for p in ALL}
    assert {"tasks_v0.3.yaml", "eval_gauntlet_v0.3.yaml", "eval_gauntlet.yaml", "tasks_light.yaml"} <= names


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.name)
def test_every_llm_foundry_task_list_loads(path, shared_data):
    tasks = load_task_configs(EvalConfig(icl_tasks_file=str(path)))
    assert tasks and len({t.label for t in tasks}) == len(tasks)
    for t in tasks:  # llm-foundry's `eval/local_data/<category>/<file>` maps onto a mirror of local_data
        if t.dataset_uri.startswith("eval/local_data/"):
            local = resolve_local(t.dataset_uri, shared_data / "icl")
            assert local.parent.parent == shared_data / "icl", t.dataset_uri


@pytest.mark.parametrize("path", GAUNTLETS, ids=lambda p: p.name)
def test_every_llm_foundry_gauntlet_loads_and_scores_chance_as_zero(path):
    """eval_gauntlet.yaml names `programming` in core_average without defining it: llm-foundry leaves it
    out of the average, and so do we (it used to be refused)."""
    cfg = gauntlet_config(yaml.safe_load(path.read_text()))
    chance = {b.label: b.random_baseline for c in cfg.categories for b in c.benchmarks}
    out = compute_gauntlet(chance, cfg)
    assert all(v == pytest.approx(0.0) for v in out["averages"].values() if v is not None)


def test_eval_icl_tasks_path_means_the_task_file():
    assert expand_train_args(["task=eval", "eval.icl_tasks=eval/yamls/tasks_v0.3.yaml"]) == [
        "task=eval",
        "eval.icl_tasks_file=eval/yamls/tasks_v0.3.yaml",
    ]
    kept = ["eval.icl_tasks=[]", "eval.icl_tasks=null", "eval.icl_tasks.0.num_fewshot=[1]"]
    assert expand_train_args(kept) == kept


@needs
def test_train_py_task_eval_runs_llm_foundry_task_and_gauntlet_yamls(
    tmp_path, monkeypatch, shared_data, neox_tokenizer_path
):
    from hydra import compose, initialize_config_dir

    from foundry.config import register_configs
    from foundry.tasks import run_task

    if not (shared_data / "icl").is_dir() or not neox_tokenizer_path.is_file():
        pytest.skip("needs ../shared/data/icl and the gpt-neox-20b tokenizer")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVAL_DATA", str(shared_data / "icl"))
    monkeypatch.delenv("RUN_NAME", raising=False)
    register_configs()
    args = expand_train_args([
        "task=eval", "model=mpt-tiny", "model.vocab_size=50304", f"tokenizer.name={neox_tokenizer_path}",
        f"eval.icl_tasks={LF / 'copa.yaml'}", f"eval.gauntlet={LF / 'eval_gauntlet_v0.3.yaml'}", "eval.limit=4",
    ])  # fmt: skip
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        run_task(compose("train", overrides=args))
    doc = json.loads((tmp_path / "outputs" / "dev" / "icl_results.json").read_text())
    assert list(doc["tasks"]) == ["copa/0-shot"]
    assert doc["gauntlet"]["benchmarks"]["copa/0-shot"]["category"] == "commonsense_reasoning"
    assert doc["gauntlet"]["partial"]["categories"]["commonsense_reasoning"] is not None
