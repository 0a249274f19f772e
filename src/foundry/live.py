"""The liveness record `<run_dir>/live.json` (written by `foundry.callbacks.liveness`, read by `foundry.runs`).

Design note: the schema is a leaf module that both sides import (`foundry.callbacks` writes, `foundry.runs`
reads; neither imports the other), so `python -m foundry.runs list` never imports the training stack (torch)
just to parse a small JSON file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["LIVE_FILE", "Live", "process_token", "read_live", "same_process", "stale_after"]

LIVE_FILE = "live.json"


@dataclass(kw_only=True)
class Live:
    """Rank 0's latest liveness record."""

    pid: int
    host: str
    step: int
    max_steps: int
    phase: str
    """fit | step | preempted | done."""
    time: float
    """Unix seconds of this refresh."""
    started: float
    """Unix seconds when this process reached fit start."""
    attempt: int = 0
    """torchrun's restart count (`TORCHELASTIC_RESTART_COUNT`; 0 outside torchrun)."""
    interval_s: float = 10.0
    """How often the record is refreshed while training (readers derive staleness from it)."""
    token: str | None = None
    """`process_token(pid)` when written: tells this process from a later one that reuses its pid."""


def process_token(pid: int) -> str | None:
    """An identity of process `pid` that a reused pid does not share: the boot's id and the process's start
    time in clock ticks since boot (Linux procfs); None where procfs is missing or the process is gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return f"{boot}:{fields[19]}"  # field 22 of stat: starttime (fields[0] is field 3, the state)
    except (OSError, IndexError):
        return None


def same_process(pid: int, token: str | None) -> bool:
    """Whether `pid` is still the process a record with `token` was written by. A record without a token is
    trusted only where tokens cannot be read at all (no procfs): a pid alone may name anyone's process now."""
    current = process_token(pid)
    if current is None:
        return token is None
    return token == current


def stale_after(interval_s: float) -> float:
    """Seconds after its last refresh that a record stops counting as live (3 intervals, at least 60 s)."""
    return max(3 * interval_s, 60.0)


def read_live(text: str) -> Live | None:
    """The record in `text` (the content of `live.json`), or None when it is not one."""
    try:
        return Live(**json.loads(text))
    except (ValueError, TypeError):
        return None
