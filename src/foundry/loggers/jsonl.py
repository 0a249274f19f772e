"""`metrics.jsonl`: one JSON object per `log_metrics` call, `{"step": ..., <metric>: ...}`.

Design note: append-only lines are trivially parsed by anything (pandas, jq, the multirun summary) and
survive a crash up to the last flushed line; each call is flushed because logging is at most once a step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["JsonlLogger", "read_metrics"]


def _clean(v: float) -> float | None:
    return None if isinstance(v, float) and not math.isfinite(v) else v


class JsonlLogger:
    """Writes metrics to `path` (the parent directory is created).

    Args:
        path: The file, usually `<run_dir>/metrics.jsonl`.
        resume_step: When resuming from a checkpoint at this step, rows logged after it (by the run that
            crashed) are dropped first, so the file has no duplicate and no gap.
    """

    def __init__(self, path: str | Path, *, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            _truncate_after(self.path, resume_step)
        self._file = self.path.open("a", encoding="utf-8")

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Not stored here (the run directory's `run.json` has them)."""

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """Appends one line."""
        row = {"step": step, **{k: _clean(float(v)) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        if not self._file.closed:
            self._file.close()


def _truncate_after(path: Path, step: int) -> None:
    """Keeps the rows with `step <= step` (atomically; a torn last line is dropped too)."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("step", 0) <= step:
            kept.append(line)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """Reads a `metrics.jsonl` back as a list of dicts, one per logged step (`{"step": ..., <metric>: ...}`;
    a non-finite value is None)."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
