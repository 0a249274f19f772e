"""`events.jsonl`: the launcher's and the ranks' structured record of a supervised run.

A leaf module (standard library only): the launcher writes it; loggers, `foundry.runs` and tests read it.

Design note: every process (the launcher and each rank's worker entry) appends whole JSON lines with one
`os.write` on an `O_APPEND` descriptor, so lines from several processes never interleave on a local disk and
no lock or server is needed. Each line has `event`, `time` (unix seconds) and event-specific fields.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from foundry.rundir import layout

__all__ = ["EVENTS_FILE", "append_event", "read_events"]

EVENTS_FILE = layout.EVENTS


def append_event(run_dir: str | Path, event: str, **fields: Any) -> dict[str, Any]:
    """Appends `{"event": event, "time": now, **fields}` to `<run_dir>/events.jsonl`; returns the record."""
    record: dict[str, Any] = {"event": event, "time": round(time.time(), 3), **fields}
    path = Path(run_dir) / EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
    return record


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `<run_dir>/events.jsonl` in order (none when the file does not exist)."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
