"""`task=eval` with no data for any of its tasks (`make eval EVAL=light` without EVAL_DATA): one error naming the
data folder and EVAL_DATA, exit 2, and the previous results in the run folder left as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs
from foundry.errors import ConfigError
from foundry.tasks import run_task
from tests.train_py import run_train_py

CONF = Path(__file__).resolve().parents[3] / "conf"
RESULTS = ("config.yaml", "icl_results.md", "icl_results.json", "eval_results.json", "final_metrics.json")


def _previous_eval(run_dir: Path) -> dict[str, str]:
    run_dir.mkdir(parents=True)
    for name in RESULTS:
        (run_dir / name).write_text(f"previous {name}\n")
    return {name: (run_dir / name).read_text() for name in RESULTS}


def test_no_data_for_any_task_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVAL_DATA", str(tmp_path / "no-icl"))
    before = _previous_eval(tmp_path / "outputs" / "dev")  # run_task's folder outside a Hydra run
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=["task=eval", "model=mpt-tiny", "eval=light"])
    with pytest.raises(ConfigError) as info:
        run_task(cfg)
    message = str(info.value)
    assert "\n" not in message and "EVAL_DATA" in message and str(tmp_path / "no-icl") in message
    assert "7 ICL tasks" in message and "eval=offline" in message
    assert {n: (tmp_path / "outputs" / "dev" / n).read_text() for n in RESULTS} == before
    assert not (tmp_path / "cache").exists()  # refused before the tokenizer or the model was built


@pytest.mark.slow  # ~6 s: a train.py process
def test_make_eval_light_without_its_data_exits_2_with_one_error_line(tmp_path):
    before = _previous_eval(tmp_path / "outputs" / "eval-light")
    proc = run_train_py(
        ["task=eval", "model=mpt-tiny", "eval=light", "run_name=eval-light"],
        tmp_path,
        ok=None,
        full_error=False,
        env={"EVAL_DATA": str(tmp_path / "no-icl")},
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "EVAL_DATA" in errors[0] and str(tmp_path / "no-icl") in errors[0], (
        proc.stderr
    )
    assert (
        "Traceback" not in proc.stderr and "not found" not in proc.stdout + proc.stderr
    )  # no per-task lines
    assert {n: (tmp_path / "outputs" / "eval-light" / n).read_text() for n in RESULTS} == before
