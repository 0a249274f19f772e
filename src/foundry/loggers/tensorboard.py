"""TensorBoard logger (optional dependency `tensorboard`, imported only when `logger.tensorboard` is set).

Design note: event files are written with torch's own `SummaryWriter` (it needs the `tensorboard` package and
nothing else), one folder per run: `<run_dir>/tensorboard`, so `tensorboard --logdir outputs` lists every run
and sweep job; a shared `log_dir` gets `<log_dir>/<run folder name>`. The same contract as the W&B logger:
every metric is a scalar at its optimizer step, and the hyperparameters (resolved config and `derived`,
redacted by `stackbase.secrets`) are one text entry each, as JSON in a Markdown code block. Under the
supervised launcher, changed `launch/*` counters are scalars at the step they are seen (`LaunchEvents`) and
the event list is the `launch/events` text at close. A resumed run writes a new event file in the same folder
with `purge_step = resume_step + 1`: TensorBoard then drops the steps that the crashed run logged after its
checkpoint, so the curves have no duplicate and no gap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.loggers.config import TensorBoardConfig
from foundry.loggers.launch_events import LaunchEvents
from stackbase.secrets import redact_value

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLogger", "event_dir"]


def event_dir(cfg: TensorBoardConfig, run_dir: Path) -> Path:
    """`<run_dir>/tensorboard`, or `<log_dir>/<run folder name>` when `log_dir` is set."""
    return run_dir / "tensorboard" if cfg.log_dir is None else Path(cfg.log_dir) / run_dir.name


def as_markdown(value: Any) -> str:
    """`value` as indented JSON in a Markdown code block (TensorBoard's text tab renders Markdown)."""
    text = json.dumps(value, indent=2, default=str, sort_keys=True)
    return "\n".join("    " + line for line in text.splitlines())


class TensorBoardLogger:
    """Writes TensorBoard event files for one run.

    Args:
        cfg: Folder and flush interval.
        run_dir: The run directory (the events go to `event_dir(cfg, run_dir)`).
        resume_step: The step a resumed run continues from (later steps of the earlier run are purged).
    """

    def __init__(
        self, cfg: TensorBoardConfig, *, run_dir: str | Path, resume_step: int | None = None
    ) -> None:
        try:
            # optional dependency: needs `tensorboard`
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(
                "logger=tensorboard needs TensorBoard: pip install 'foundry-stack[tensorboard]'"
            ) from e
        self.log_dir = event_dir(cfg, Path(run_dir))
        self.resume_step = resume_step
        purge = resume_step + 1 if resume_step is not None else None
        self.writer: SummaryWriter | None = SummaryWriter(
            str(self.log_dir), purge_step=purge, flush_secs=cfg.flush_secs
        )
        self._events = LaunchEvents(run_dir)
        self._unlogged = self._events.changed_counters()
        self._last_step = resume_step or 0

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """One text entry per top-level key (`config`, `derived`), redacted, at the start step."""
        assert self.writer is not None, "the TensorBoard writer is closed"
        step = self.resume_step or 0
        for name, value in redact_value(params).items():
            self.writer.add_text(name, as_markdown(value), global_step=step)

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """Every metric as a scalar at `step`."""
        assert self.writer is not None, "the TensorBoard writer is closed"
        metrics = {**metrics, **self._unlogged, **self._events.changed_counters()}
        self._unlogged = {}
        for name, value in metrics.items():
            self.writer.add_scalar(name, float(value), global_step=step)
        self._last_step = step

    def close(self) -> None:
        """The launcher's event list as text (under the launcher); flushes and closes the event file."""
        if self.writer is not None:
            if self._events.active:
                self.writer.add_text("launch/events", as_markdown(self._events.events()), self._last_step)
            self.writer.close()
            self.writer = None
