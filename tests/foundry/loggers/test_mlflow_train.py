"""Several loggers at once through real Hydra composition, and `train.py` runs logging to MLflow + TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.loggers import MLflowConfig, TensorBoardConfig, WandbConfig
from tests.train_py import REPO, run_train_py


def _logger_cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        return to_train_config(compose("train", overrides=list(overrides))).logger


@pytest.mark.parametrize(
    "selection",
    ["logger=[console,mlflow,tensorboard]", "logger=[tensorboard,mlflow]"],
)
def test_several_loggers_at_once_in_any_order(selection):
    cfg = _logger_cfg(selection)
    assert cfg.console and cfg.jsonl and cfg.wandb is None
    assert cfg.mlflow == MLflowConfig() and cfg.tensorboard == TensorBoardConfig()


def test_no_logger_yaml_nulls_out_another():
    cfg = _logger_cfg("logger=[mlflow,wandb,console]", "logger.mlflow.experiment=shared")
    assert cfg.wandb == WandbConfig() and cfg.mlflow == MLflowConfig(experiment="shared")
    single = _logger_cfg("logger=console")
    assert single.mlflow is None and single.tensorboard is None and single.wandb is None
    assert _logger_cfg("logger=tensorboard", "logger.console=false").console is False


RUN = [
    "logger=[console,mlflow,tensorboard]",
    "trainer.eval_interval=0",
    "checkpoint=local",
    "checkpoint.save_interval=3ba",
    "run_name=tracked",
]


@pytest.mark.slow
def test_train_py_logs_to_mlflow_and_tensorboard_and_a_resume_continues_the_mlflow_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = (tmp_path / "store").as_uri()
    env = {"MLFLOW_TRACKING_URI": store, "MLFLOW_ALLOW_FILE_STORE": "true"}  # MLflow 3 gates its file store
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for the client reading it back here
    run_train_py([*RUN, "trainer.max_duration=3ba"], tmp_path, env=env)
    run_dir = tmp_path / "outputs" / "tracked"
    run_id = json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    assert run.info.run_name == "tracked" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "tracked"
    assert run.data.params["config.run_name"] == "tracked" and run.data.params["derived.max_steps"] == "3"
    assert {"run.json", "config.yaml", "final_metrics.json", "hyperparameters.json"} <= {
        a.path for a in client.list_artifacts(run_id)
    }

    proc = run_train_py([*RUN, "trainer.max_duration=6ba"], tmp_path, env=env)  # autoresume from step 3
    assert "autoresume: loaded" in proc.stdout
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == run_id, "the same MLflow run"
    assert len(client.search_runs([run.info.experiment_id])) == 1
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED" and resumed.data.tags["resumed.derived.max_steps"] == "6"
    steps = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert steps == list(range(1, 7))
    final = json.loads(Path(client.download_artifacts(run_id, "final_metrics.json")).read_text())
    assert final == json.loads((run_dir / "final_metrics.json").read_text())

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 7))
    jsonl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r["train/loss"] for r in jsonl if "train/loss" in r}
    assert [e.value for e in acc.Scalars("train/loss")] == pytest.approx([by_step[s] for s in range(1, 7)])
