"""`MultirunSummary`: the Hydra callback that tabulates a sweep (`-m`), one row per job, as a Markdown file.

Design note: registered in `conf/hydra/default.yaml` (`hydra.callbacks.multirun_summary`); it only reads what
each job wrote (`final_metrics.json`) or the error Hydra recorded, so a failed job still gets a row. Overrides
are redacted (they may carry tokens or signed URLs), and the file is rewritten atomically after every job.
"""

from __future__ import annotations

import atexit
import json
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig

from foundry.rundir import layout
from foundry.rundir.files import write_text_atomic
from stackbase.secrets import redact_text

__all__ = ["MultirunSummary"]


class MultirunSummary(HydraCallback):
    """Tabulates a multirun, one row per job: its overrides, final metrics and status (`ok` or its error).

    Each sweep writes its own `<sweep dir>/summary-<YYYYmmdd-HHMMSS>.md` (sweeps sharing a `run_name` share
    the sweep dir, so a fixed name would be overwritten), rewritten atomically after every job. The table is
    printed when the sweep ends; when a job fails, Hydra aborts the sweep without `on_multirun_end`, so the
    table is printed at interpreter exit instead (after the error; the exit code stays non-zero).

    Args:
        metrics: Keys of `final_metrics.json` shown as columns.
    """

    def __init__(self, metrics: list[str] | None = None) -> None:
        self.metrics = list(metrics or ["train/loss", "eval/loss"])
        self.rows: list[tuple[list[str], dict[str, Any]]] = []
        self.path: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Reserves this sweep's summary file and arranges for the table to be printed even if a job fails."""
        self.rows = []
        try:
            self.path = _reserve_summary_path(Path(config.hydra.sweep.dir))
        except OSError:
            self.path = None
        atexit.register(self._print)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """Collects the job's overrides and final metrics (or its error) and rewrites the summary file."""
        overrides = list(getattr(job_return, "overrides", None) or [])
        status = getattr(job_return, "status", None)
        if status is not None and status.name == "FAILED":
            err = job_return._return_value
            values: dict[str, Any] = {"status": f"failed: {type(err).__name__}: {err}"}
        else:
            try:
                out_dir = Path(job_return.hydra_cfg.hydra.runtime.output_dir)
                values = {**json.loads((out_dir / layout.FINAL_METRICS).read_text()), "status": "ok"}
            except (OSError, ValueError, AttributeError) as err:
                # a job without metrics still gets a row
                values = {"status": f"no final_metrics.json ({type(err).__name__})"}
        self.rows.append((overrides, values))
        if self.path is not None:
            write_text_atomic(self.path, self.table() + "\n")

    def table(self) -> str:
        """The summary as a Markdown table; overrides shared by every job are left out of the rows."""
        common = set.intersection(*(set(o) for o, _ in self.rows)) if len(self.rows) > 1 else set()
        head = ["job", "overrides", *self.metrics, "status"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i, (ovr, vals) in enumerate(self.rows):
            cells = [str(i), redact_text(" ".join(o for o in ovr if o not in common)) or "(none)"]
            for m in self.metrics:
                v = vals.get(m)
                cells.append(f"{v:.4f}" if isinstance(v, int | float) else "-")
            cells.append(_cell(redact_text(str(vals.get("status", "-")))))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Prints the table (and where it was written)."""
        self._print()

    def _print(self) -> None:
        atexit.unregister(self._print)
        failed = sum(not str(v.get("status", "")).startswith("ok") for _, v in self.rows)
        where = f" -> {self.path}" if self.path is not None else ""
        head = f"[foundry] multirun summary ({len(self.rows)} jobs, {failed} failed){where}"
        print(f"\n{head}\n{self.table()}", flush=True)


def _cell(text: str, limit: int = 120) -> str:
    """`text` as one Markdown table cell: one line, no `|`, at most `limit` characters."""
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reserve_summary_path(sweep_dir: Path) -> Path:
    """Creates (exclusively) and returns `sweep_dir/summary-<time>[-N].md`, a name no other sweep holds."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = sweep_dir / (f"summary-{stamp}.md" if n == 0 else f"summary-{stamp}-{n}.md")
        try:
            with path.open("x"):
                return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{sweep_dir}: too many summary-{stamp}*.md files")
