"""The MLflow logger against real tracking stores: the file store, the local SQLite default, a `mlflow server`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundry.loggers import LoggerConfig, MLflowConfig, attach_final_metrics, build_loggers
from foundry.loggers.mlflow import MLflowLogger, flatten_params, metric_key, resolve_tracking_uri, run_label
from tests.conftest import _free_port

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402 - after the importorskip
from mlflow.utils.validation import _validate_metric_name, _validate_param_name  # noqa: E402

SECRET = "sk-live-0123456789abcdef"
PARAMS = {
    "config": {
        "optimizer": {"name": "decoupled_adamw", "lr": 6e-4, "betas": [0.9, 0.95]},
        "storage": {"profiles": {"s3://bucket": {"secret_access_key": SECRET}}},
        "run_name": "run-a",
    },
    "derived": {"max_steps": 3, "tokens_per_step": 512},
}


def test_tracking_uri_config_then_environment_then_local_sqlite(tmp_path, monkeypatch):
    assert resolve_tracking_uri("http://127.0.0.1:5000", {"MLFLOW_TRACKING_URI": "file:///x"}) == (
        "http://127.0.0.1:5000"
    )
    assert resolve_tracking_uri(None, {"MLFLOW_TRACKING_URI": "file:///x"}) == "file:///x"
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(None, {}) == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    assert (tmp_path / "mlruns").is_dir()


def test_run_label_names_sweep_jobs_by_their_folder():
    assert run_label("run-a", Path("outputs/run-a")) == "run-a"
    assert run_label("run-a", Path("outputs/multirun/run-a/3_optimizer.lr=0.1")) == "run-a/3_optimizer.lr=0.1"


@given(st.text(max_size=300))
def test_metric_key_is_always_accepted_by_mlflow(name):
    key = metric_key(name)
    _validate_metric_name(key)  # raises on a name MLflow rejects
    _validate_param_name(key)
    assert len(key) <= 250


def test_metric_key_keeps_our_metric_names():
    for name in [
        "train/loss",
        "lr-AdamW/group0",
        "throughput/device/mfu",
        "eval/perplexity",
        "time/remaining",
    ]:
        assert metric_key(name) == name


def test_flatten_params_dotted_keys_json_lists_and_cut_long_values():
    flat = flatten_params({"a": {"b": {"c": 1}, "l": [1, "x"], "e": {}}, "n": None, "long": "y" * 7000})
    assert flat["a.b.c"] == "1" and flat["a.l"] == '[1, "x"]' and flat["a.e"] == "{}" and flat["n"] == "None"
    assert len(flat["long"]) == 6000 and flat["long"].endswith("...")


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # as if MLflow were not installed
    cfg = LoggerConfig(console=False, jsonl=False, mlflow=MLflowConfig(tracking_uri=f"file://{tmp_path}"))
    with pytest.raises(
        ImportError, match=r"logger=mlflow needs MLflow: pip install 'foundry-stack\[mlflow\]'"
    ):
        build_loggers(cfg, run_dir=tmp_path, run_name="r", max_steps=1)


def _log_a_run(cfg: MLflowConfig, run_dir: Path, *, resume: bool = False, steps=range(1, 4)) -> MLflowLogger:
    (run_dir / "run.json").parent.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"config": {"run_name": "run-a"}}))
    log = MLflowLogger(cfg, run_name="run-a", run_dir=run_dir, resume=resume)
    log.log_hyperparameters(PARAMS)
    for step in steps:
        log.log_metrics({"train/loss": 1.0 / step, "lr-AdamW/group0": 1e-4 * step}, step=step)
    log.log_metrics({"eval/loss": float("nan")}, step=max(steps))
    log.close()
    return log


def _check_run(client: MlflowClient, run_id: str, *, experiment: str = "run-a") -> None:
    run = client.get_run(run_id)
    assert run.info.run_name == "run-a" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == experiment
    params = run.data.params
    assert params["config.optimizer.lr"] == "0.0006" and params["derived.max_steps"] == "3"
    assert params["config.optimizer.betas"] == "[0.9, 0.95]"
    assert [v for k, v in params.items() if k.endswith("secret_access_key")] == ["***"]
    history = client.get_metric_history(run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"run.json", "hyperparameters.json"} <= artifacts
    hp = json.loads(Path(client.download_artifacts(run_id, "hyperparameters.json")).read_text())
    assert SECRET not in json.dumps(hp) and hp["derived"]["tokens_per_step"] == 512


def test_file_store_run_params_metrics_artifacts_resume_and_status(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this switch
    cfg = MLflowConfig(tracking_uri=(tmp_path / "store").as_uri(), tags={"team": "llm"})
    run_dir = tmp_path / "outputs" / "run-a"
    first = _log_a_run(cfg, run_dir)
    client = MlflowClient(tracking_uri=cfg.tracking_uri)
    _check_run(client, first.run_id)
    assert client.get_run(first.run_id).data.tags["team"] == "llm"
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == first.run_id

    changed = MLflowLogger(cfg, run_name="run-a", run_dir=run_dir, resume=True)  # autoresume from step 3
    assert changed.run_id == first.run_id, "a resumed training run continues the same MLflow run"
    changed.log_hyperparameters({**PARAMS, "derived": {"max_steps": 6, "tokens_per_step": 512}})
    changed.log_metrics({"train/loss": 0.25}, step=4)
    changed.close()
    run = client.get_run(first.run_id)
    assert run.data.params["derived.max_steps"] == "3", "MLflow params are immutable"
    assert run.data.tags["resumed.derived.max_steps"] == "6"
    assert [m.step for m in client.get_metric_history(first.run_id, "train/loss")] == [1, 2, 3, 4]

    fresh = MLflowLogger(cfg, run_name="run-a", run_dir=run_dir)  # not a resume: a new MLflow run
    assert fresh.run_id != first.run_id
    try:
        raise RuntimeError("a failing step")
    except RuntimeError:
        fresh.close()  # the trainer closes its loggers in a `finally`: the error in flight marks the run
    assert client.get_run(fresh.run_id).info.status == "FAILED"

    (run_dir / "final_metrics.json").write_text(json.dumps({"train/loss": 0.25}))
    attach_final_metrics(LoggerConfig(mlflow=cfg), run_dir)
    assert "final_metrics.json" in {a.path for a in client.list_artifacts(fresh.run_id)}


@pytest.mark.slow
def test_local_sqlite_store_is_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    log = _log_a_run(MLflowConfig(), tmp_path / "outputs" / "run-a")
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    assert log.tracking_uri == uri
    _check_run(MlflowClient(tracking_uri=uri), log.run_id)
    assert list((tmp_path / "mlruns").rglob("run.json")), "artifacts stay in ./mlruns"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 (SQLite backend, proxied artifacts), ~10 s to start."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    cmd = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--workers",
        "1",
    ]
    url = f"http://127.0.0.1:{port}"
    log = (root / "server.log").open("wb")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner (needs `huey`)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(f"{url}/health", proc, seconds=120, log=root / "server.log")
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()


def _wait_for(url: str, proc: subprocess.Popen, *, seconds: float, log: Path) -> None:
    """Polls `url` until it answers (the server starts slowly on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.2)


@pytest.mark.slow
def test_tracking_server_run_params_metrics_artifacts_and_resume(tmp_path, mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # the environment variable, no config
    cfg = MLflowConfig(experiment="shared")
    run_dir = tmp_path / "outputs" / "run-a"
    first = _log_a_run(cfg, run_dir)
    client = MlflowClient(tracking_uri=mlflow_server)
    _check_run(client, first.run_id, experiment="shared")
    resumed = _log_a_run(cfg, tmp_path / "elsewhere" / "run-a", resume=True, steps=range(4, 7))
    assert resumed.run_id == first.run_id, "found by name on the server, from another run directory"
    assert [m.step for m in client.get_metric_history(first.run_id, "train/loss")] == list(range(1, 7))


def test_launcher_events_reach_the_run_like_wandb(tmp_path, monkeypatch):
    from foundry.events import append_event
    from foundry.loggers.mlflow import publish_launch_events

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    cfg = MLflowConfig(tracking_uri=(tmp_path / "store").as_uri())
    run_dir = tmp_path / "outputs" / "run-a"
    append_event(run_dir, "start", run_name="run-a")
    append_event(run_dir, "failure", rank=1)
    append_event(run_dir, "restart", attempt=1)
    append_event(run_dir, "resumed", resumed_step=2, time_lost_s=4.5)
    log = MLflowLogger(cfg, run_name="run-a", run_dir=run_dir)
    log.log_metrics({"train/loss": 1.0}, step=3)
    append_event(run_dir, "failure", rank=0)
    log.log_metrics({"train/loss": 0.5}, step=4)
    log.log_metrics({"train/loss": 0.4}, step=5)  # nothing new: no counter row
    log.close()
    client = MlflowClient(tracking_uri=cfg.tracking_uri)
    history = client.get_metric_history(log.run_id, "launch/failures")
    assert [(m.step, m.value) for m in history] == [(3, 1.0), (4, 2.0)]
    assert [(m.step, m.value) for m in client.get_metric_history(log.run_id, "launch/time_lost_s")] == [
        (3, 4.5)
    ]
    assert "events.jsonl" in {a.path for a in client.list_artifacts(log.run_id)}

    append_event(run_dir, "summary", final_step=5, restarts=1)  # the launcher, after torchrun exited
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert (
        publish_launch_events(run_dir) == log.run_id
    )  # the URI recorded in mlflow_run.json (no secret in it)
    events = Path(client.download_artifacts(log.run_id, "events.jsonl")).read_text()
    assert '"event": "summary"' in events
    assert client.get_metric_history(log.run_id, "launch/restarts")[-1].step == 5


def test_run_record_keeps_no_secret(tmp_path, monkeypatch):
    from foundry.loggers.mlflow import _write_run_record

    _write_run_record(tmp_path, "abc", "1", f"https://user:{SECRET}@mlflow.example.com")
    record = json.loads((tmp_path / "mlflow_run.json").read_text())
    assert SECRET not in json.dumps(record) and record["reusable_uri"] is False
