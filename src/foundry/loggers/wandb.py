"""Weights & Biases logger (optional dependency `wandb`, imported only when `logger=wandb`).

Design note: W&B is just another `Logger`; offline mode (`WANDB_MODE=offline` or `logger.wandb.mode`)
writes `<run_dir>/wandb/offline-run-*` for a later `wandb sync`, so it works with no network or login.
The W&B run name is the run's `run_name` and the resolved config is its `config`. Everything W&B records is
redacted first (`stackbase.secrets`): the config, the tags and group, and the command line W&B copies
from `sys.argv` into the run's metadata (swapped for a redacted copy only while `wandb.init` reads it).

Under the supervised launcher (`python -m foundry.launch`, which writes `<run_dir>/events.jsonl`) the
launcher's events reach the same W&B run without a second writer: W&B allows one process per run, and the one
that writes it during training is this logger on rank 0. At start and at every log step it rereads the events
file when its size changed and puts the whole list into the run summary (`launch/events`, idempotent, so a
restarted rank 0 that resumes the run rewrites rather than duplicates it) and cumulative counters into the
history row of that step (`launch/failures`, `launch/restarts`, `launch/time_lost_s`, ...; history rows cannot
go back in step, so counters, not one row per event). The logger also leaves `<run_dir>/wandb/launch-run.json`
(run id, project, entity, mode): after torchrun has exited, the launcher resumes that run once, only to add
its final `summary` event and the complete event list (`publish_launch_summary`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from foundry.events import read_events
from foundry.loggers.config import WandbConfig
from foundry.loggers.launch_events import LaunchEvents, launch_counters
from stackbase.secrets import redact_text, redact_value

if TYPE_CHECKING:
    from wandb import Run

__all__ = ["LAUNCH_RUN_FILE", "WandbLogger", "publish_launch_summary"]

LAUNCH_RUN_FILE = "launch-run.json"
"""In `<run_dir>/wandb/`: the W&B run the launcher resumes for its summary."""


class WandbLogger:
    """Logs to a W&B run.

    Args:
        cfg: Project/entity/group/tags/mode.
        run_name: The W&B run name.
        run_dir: W&B's files go to `<run_dir>/wandb`.
        run_id: Continue this W&B run (a resumed training run passes the id its checkpoint recorded).
    """

    def __init__(
        self, cfg: WandbConfig, *, run_name: str, run_dir: str | Path, run_id: str | None = None
    ) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "logger=wandb needs the wandb package: pip install 'foundry-stack[wandb]'"
            ) from e
        self._wandb = wandb
        # WandbConfig checks it
        mode = cast("Literal['online', 'offline', 'disabled'] | None", cfg.mode)
        with _redacted_argv():
            self.run: Run | None = wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                group=redact_text(cfg.group) if cfg.group else None,
                tags=[redact_text(t) for t in cfg.tags] or None,
                name=run_name,
                dir=str(run_dir),
                mode=mode,
                reinit="finish_previous",
                id=run_id,
                resume="allow" if run_id else None,
            )
        self._launch = LaunchEvents(run_dir)
        self._unlogged: dict[str, float] = {}
        # under the launcher
        if self.run is not None and self._launch.active:
            _write_launch_run(Path(run_dir), self.run)
            self._sync_events()

    def _sync_events(self) -> None:
        """When events.jsonl grew: the event list into the run summary, changed counters into `_unlogged`."""
        polled = self._launch.poll() if self.run is not None else None
        if polled is None or self.run is None:
            return
        events, changed = polled
        self.run.summary.update({"launch/events": events, **self._launch.counters})
        self._unlogged.update(changed)

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Stores the resolved config (and derived quantities), credentials masked, as the run config."""
        assert self.run is not None, "the W&B run is closed"
        self.run.config.update(redact_value(params), allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """`wandb.log(metrics, step=step)`."""
        assert self.run is not None, "the W&B run is closed"
        self._sync_events()
        self.run.log({**metrics, **self._unlogged}, step=step)
        self._unlogged = {}

    def close(self) -> None:
        """Finishes the run."""
        if self.run is not None:
            self.run.finish()
            self.run = None


def _write_launch_run(run_dir: Path, run: Run) -> None:
    folder = run_dir / "wandb"
    folder.mkdir(parents=True, exist_ok=True)
    mode = "disabled" if run.disabled else "offline" if run.offline else "online"
    record = {"id": run.id, "project": run.project, "entity": run.entity, "mode": mode, "name": run.name}
    (folder / LAUNCH_RUN_FILE).write_text(json.dumps(record))


def publish_launch_summary(run_dir: str | Path) -> str | None:
    """Resumes the run's W&B run (if its training logged to W&B) to add the launcher's events; its id or None.

    Called by the launcher after torchrun exited, so it is the run's only writer. Needs `wandb` only when
    `<run_dir>/wandb/launch-run.json` exists.
    """
    path = Path(run_dir) / "wandb" / LAUNCH_RUN_FILE
    if not path.exists():
        return None
    info = json.loads(path.read_text())
    if info.get("mode") == "disabled":
        return None
    # optional dependency, present when the training run wrote launch-run.json
    import wandb

    events = read_events(run_dir)
    summary: dict[str, Any] = next((e for e in reversed(events) if e.get("event") == "summary"), {})
    try:
        run = wandb.init(
            project=info["project"], entity=info.get("entity"), id=info["id"], name=info.get("name"),
            dir=str(run_dir), mode=info["mode"], resume="allow", reinit="finish_previous",
        )  # fmt: skip
        try:
            run.summary.update(
                {"launch/events": events, "launch/summary": summary, **launch_counters(events)}
            )
        finally:
            run.finish()
    except Exception as e:
        # W&B unreachable: the run's outcome and exit code stand
        print(
            f"[foundry.launch] W&B run {info['id']}: could not add the launch summary: {e}", file=sys.stderr
        )
        return None
    return str(info["id"])


@contextmanager
def _redacted_argv() -> Iterator[None]:
    """`sys.argv` with its secrets masked for the duration of the block (W&B records the command line).

    W&B reads the arguments from `sys.argv` itself, with no setting to pass them; the original list is put
    back on exit, also when `wandb.init` raises.
    """
    original = sys.argv
    sys.argv = [redact_text(arg) for arg in original]
    try:
        yield
    finally:
        sys.argv = original
