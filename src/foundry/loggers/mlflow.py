"""MLflow logger (optional dependency `mlflow-skinny`, imported only when `logger.mlflow` is set).

Design note: everything goes through one `MlflowClient` bound to an explicit tracking URI (the config's, else
`MLFLOW_TRACKING_URI`, else a SQLite store in `./mlruns/`), never `mlflow.set_tracking_uri`/`start_run`, which
are process-wide state. The same contract as the W&B logger:

- the experiment is `logger.mlflow.experiment` or `run_name`; the run is named `run_name` (a sweep job adds
  its folder: `<run_name>/<job dir>`) and tagged `foundry.run_key` (a hash of that name) so that a resumed
  training run (autoresume from a checkpoint) finds and continues the same MLflow run, on any machine that
  shares the tracking server;
- hyperparameters (the resolved config and `derived`) are redacted (`stackbase.secrets`), then logged
  as flat params (`config.optimizer.lr`) -- MLflow params are immutable strings of at most 6000 characters, so
  longer values are cut (the whole tree is also the `hyperparameters.json` artifact) and a value a resumed run
  changed is recorded as the tag `resumed.<key>`;
- metrics by optimizer step, one `log_batch` per call, sent by MLflow's async logging thread so a step does
  not wait for the store (a local SQLite commit takes tens of ms); at most one batch is in flight: each call
  first waits for the previous one, so an unreachable server stops the run one step late, not at the end
  (names MLflow rejects get their bad characters replaced: `metric_key`);
- under the supervised launcher, its events (`events.jsonl`): changed `launch/*` counters with the metrics of
  the step they are seen at (`LaunchEvents`), the file itself as an artifact at close, and once more after
  torchrun exited, with the launcher's final `summary` event (`publish_launch_events`);
- at close: `run.json`, `config.yaml`, `icl_results.md` and `events.jsonl` of the run directory as artifacts
  and the run's status (FINISHED; FAILED on an exception; KILLED on an interrupt or preemption).
  `final_metrics.json` is written by the task after the loggers close, so `attach_final_metrics` uploads it
  then, to the run `<run_dir>/mlflow_run.json` names (it records the tracking URI only when it holds no
  secret; otherwise a later process takes it from `MLFLOW_TRACKING_URI`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.events import EVENTS_FILE, read_events
from foundry.loggers.config import MLflowConfig
from foundry.loggers.launch_events import LaunchEvents, launch_counters
from foundry.rundir import layout
from stackbase.secrets import redact_text, redact_url, redact_value

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from mlflow.utils.async_logging.run_operations import RunOperations

__all__ = [
    "MLflowLogger",
    "attach_final_metrics",
    "flatten_params",
    "metric_key",
    "publish_launch_events",
    "resolve_tracking_uri",
    "run_label",
]

RUN_FILE = "mlflow_run.json"
"""Written to the run directory: which MLflow run this training run logs to (for `attach_final_metrics`)."""
ARTIFACTS = (layout.RUN, layout.CONFIG, layout.ICL_RESULTS, EVENTS_FILE)
"""Run-directory files uploaded at close when they exist (`final_metrics.json` comes after the close)."""
MAX_KEY = 250
MAX_VALUE = 6000
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
RUN_KEY_TAG = "foundry.run_key"


def _client(tracking_uri: str) -> MlflowClient:
    """An `MlflowClient` for `tracking_uri`; a missing package names the extra to install."""
    try:
        # optional dependency: imported only when the logger is used
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise ImportError("logger=mlflow needs MLflow: pip install 'foundry-stack[mlflow]'") from e
    return MlflowClient(tracking_uri=tracking_uri)


def resolve_tracking_uri(configured: str | None, environ: Mapping[str, str]) -> str:
    """The config's URI, else `MLFLOW_TRACKING_URI`, else `sqlite:///<cwd>/mlruns/mlflow.db`
    (created here)."""
    if configured:
        return configured
    if environ.get("MLFLOW_TRACKING_URI"):
        return environ["MLFLOW_TRACKING_URI"]
    local = Path("mlruns").resolve()
    local.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{local / 'mlflow.db'}"


def run_label(run_name: str, run_dir: Path) -> str:
    """The MLflow run name: `run_name`, or `<run_name>/<job folder>` for a sweep job (its folder differs)."""
    return run_name if run_dir.name == run_name else f"{run_name}/{run_dir.name}"


def metric_key(name: str) -> str:
    """`name` as MLflow accepts it: only `[/\\w.\\- ]`, no empty/`.`/`..` path part,
    at most 250 characters."""
    cleaned = re.sub(r"[^/\w.\- ]", "_", name)
    parts = ["_" if p in ("", ".", "..") else p for p in cleaned.split("/")]
    return "/".join(parts)[:MAX_KEY].rstrip("/") or "_"


def flatten_params(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts -> `{"a.b.c": "value"}` with MLflow-safe keys; values cut to 6000 characters."""
    flat: dict[str, str] = {}
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            flat.update(flatten_params(value, prefix=f"{key}."))
            continue
        text = json.dumps(value, default=str) if isinstance(value, list | tuple | dict) else str(value)
        if len(text) > MAX_VALUE:
            text = text[: MAX_VALUE - 3] + "..."
        flat[metric_key(key)] = text
    return flat


class MLflowLogger:
    """Logs to an MLflow run (created, or continued when `resume`).

    Args:
        cfg: Tracking URI, experiment, tags, artifacts.
        run_name: The training run's name (experiment name by default, and the MLflow run name).
        run_dir: The run directory (artifacts are read from it; `mlflow_run.json` is written to it).
        resume: The training run resumes from a checkpoint: continue the latest MLflow run of the same name.
    """

    def __init__(
        self, cfg: MLflowConfig, *, run_name: str, run_dir: str | Path, resume: bool = False
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.tracking_uri = resolve_tracking_uri(cfg.tracking_uri, os.environ)
        self.client = _client(self.tracking_uri)
        self.experiment_id = self._experiment(cfg.experiment or run_name)
        label = run_label(run_name, self.run_dir)
        found = self._find_run(label) if resume else None
        self.resumed = found is not None
        if found is not None:
            self.client.update_run(found, status="RUNNING")
            self.run_id = found
        else:
            tags = {redact_text(k): redact_text(v) for k, v in cfg.tags.items()}
            tags |= {
                RUN_KEY_TAG: _run_key(label),
                "foundry.run_dir": redact_text(str(self.run_dir.resolve())),
            }
            self.run_id = self.client.create_run(self.experiment_id, run_name=label, tags=tags).info.run_id
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _write_run_record(self.run_dir, self.run_id, self.experiment_id, self.tracking_uri)
        self._closed = False
        self._in_flight: RunOperations | None = None
        self._events = LaunchEvents(self.run_dir)
        self._unlogged = self._events.changed_counters()

    def _experiment(self, name: str) -> str:
        """The id of experiment `name`, created if absent (a concurrent creator wins the race harmlessly)."""
        # optional dependency (see `_client`)
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except MlflowException:
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return str(again.experiment_id)

    def _find_run(self, label: str) -> str | None:
        """The newest run of this experiment tagged with `label`'s key, or None."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{RUN_KEY_TAG}` = '{_run_key(label)}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Flat params of the redacted tree (new keys only on resume; changed values as `resumed.<key>`
        tags)."""
        # optional dependency (see `_client`)
        from mlflow.entities import Param, RunTag

        tree = redact_value(params)
        flat = flatten_params(tree)
        existing = self.client.get_run(self.run_id).data.params if self.resumed else {}
        new = [Param(k, v) for k, v in flat.items() if k not in existing]
        changed = [RunTag(metric_key(f"resumed.{k}"), v) for k, v in flat.items() if existing.get(k, v) != v]
        for i in range(0, len(new), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=new[i : i + PARAMS_PER_BATCH])
        for i in range(0, len(changed), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=changed[i : i + PARAMS_PER_BATCH])
        self.client.log_dict(self.run_id, tree, "hyperparameters.json")

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """One `log_batch` with every metric at `step` (NaN and infinities are stored as MLflow stores
        them)."""
        # optional dependency (see `_client`)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = {**metrics, **self._unlogged, **self._events.changed_counters()}
        self._unlogged = {}
        rows = [Metric(metric_key(k), float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(rows), METRICS_PER_BATCH):
            self._wait()
            batch = rows[i : i + METRICS_PER_BATCH]
            self._in_flight = self.client.log_batch(self.run_id, metrics=batch, synchronous=False)

    def _wait(self) -> None:
        """Blocks until the batch in flight is stored (raises what storing it raised)."""
        op, self._in_flight = self._in_flight, None
        if op is not None:
            op.wait()

    def close(self) -> None:
        """Uploads the run directory's files and ends the run
        (its status from the exception in flight, if any)."""
        if self._closed:
            return
        self._closed = True
        # close() runs in the trainer's `finally`: an exception may be propagating
        error = sys.exc_info()[1]
        self._wait()
        if self.cfg.artifacts:
            for name in ARTIFACTS:
                if (self.run_dir / name).is_file():
                    self.client.log_artifact(self.run_id, str(self.run_dir / name))
        status = "FINISHED"
        # SystemExit: also a preemption's requeue exit
        if isinstance(error, KeyboardInterrupt | SystemExit):
            status = "KILLED"
        elif error is not None:
            status = "FAILED"
        self.client.set_terminated(self.run_id, status=status)


def _write_run_record(run_dir: Path, run_id: str, experiment_id: str, tracking_uri: str) -> None:
    """`<run_dir>/mlflow_run.json`; the tracking URI is kept only when it has no secret to mask."""
    record: dict[str, Any] = {"run_id": run_id, "experiment_id": experiment_id}
    record["tracking_uri"] = redact_url(tracking_uri)
    record["reusable_uri"] = record["tracking_uri"] == tracking_uri
    (run_dir / RUN_FILE).write_text(json.dumps(record))


def attach_final_metrics(cfg: MLflowConfig, run_dir: str | Path) -> None:
    """Uploads `<run_dir>/final_metrics.json` to the MLflow run `<run_dir>/mlflow_run.json` names
    (if both exist)."""
    run_dir = Path(run_dir)
    record, final = run_dir / RUN_FILE, run_dir / layout.FINAL_METRICS
    if not cfg.artifacts or not record.is_file() or not final.is_file():
        return
    run_id = json.loads(record.read_text())["run_id"]
    _client(resolve_tracking_uri(cfg.tracking_uri, os.environ)).log_artifact(run_id, str(final))


def publish_launch_events(run_dir: str | Path) -> str | None:
    """After torchrun exited: the launcher's events (with its `summary`) into the run's MLflow run;
    its id or None.

    The counterpart of `foundry.loggers.wandb.publish_launch_summary`: `events.jsonl` as an artifact and the
    final `launch/*` counters at the run's last step. The tracking URI is the one `mlflow_run.json` recorded,
    else `MLFLOW_TRACKING_URI`. Does nothing when the training run did not log to MLflow; an unreachable
    server is reported on stderr and does not change the launch's outcome.
    """
    run_dir = Path(run_dir)
    path, events = run_dir / RUN_FILE, run_dir / EVENTS_FILE
    if not path.is_file() or not events.is_file():
        return None
    info = json.loads(path.read_text())
    uri = info["tracking_uri"] if info.get("reusable_uri") else os.environ.get("MLFLOW_TRACKING_URI")
    try:
        # optional dependency, present when mlflow_run.json was written
        from mlflow.entities import Metric

        client = _client(resolve_tracking_uri(uri, os.environ))
        run = client.get_run(info["run_id"])
        step = max(
            (int(m.step) for m in _latest_metrics(client, info["run_id"], run.data.metrics)), default=0
        )
        now = int(time.time() * 1000)
        counters = launch_counters(read_events(run_dir))
        client.log_batch(info["run_id"], metrics=[Metric(k, v, now, step) for k, v in counters.items()])
        client.log_artifact(info["run_id"], str(events))
    except Exception as e:
        # MLflow unreachable: the run's outcome and exit code stand
        print(
            f"[foundry.launch] MLflow run {info['run_id']}: could not add the launch events: {e}",
            file=sys.stderr,
        )
        return None
    return str(info["run_id"])


def _latest_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float]) -> list[Any]:
    """The last logged value (with its step) of the run's training loss, or of any metric it has."""
    key = "train/loss" if "train/loss" in metrics else next(iter(metrics), None)
    return client.get_metric_history(run_id, key)[-1:] if key is not None else []


def _run_key(label: str) -> str:
    """A filter-safe tag value for `label` (sweep folder names carry quotes, `=` and commas)."""
    return hashlib.sha256(label.encode()).hexdigest()[:32]
