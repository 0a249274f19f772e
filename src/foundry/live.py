"""The liveness record `<run_dir>/live.json` (written by `foundry.callbacks.liveness`, read by
`foundry.runs`).

Design note: the schema is a leaf module that both sides import (`foundry.callbacks` writes, `foundry.runs`
reads; neither imports the other), so `python -m foundry.runs list` never imports the training stack (torch)
just to parse a small JSON file.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundry.rundir import layout
from stackbase.bounded import parse_json

__all__ = ["LIVE_FILE", "Live", "read_live", "stale_after"]

LIVE_FILE = layout.LIVE


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
    """`stackbase.process.start_token(pid)` when written:
    tells this process from a later one reusing its pid."""
    proof: str | None = None
    """`stackbase.process.claim(...).proof`: what `runs stop` checks before it signals `pid` (issue 39)."""


def stale_after(interval_s: float) -> float:
    """Seconds after its last refresh that a record stops counting as live (3 intervals, at least 60 s)."""
    return max(3 * interval_s, 60.0)


_TYPES = {"pid": int, "host": str, "step": int, "max_steps": int, "phase": str, "time": float,
          "started": float, "attempt": int, "interval_s": float, "token": str, "proof": str}  # fmt: skip


def read_live(text: str) -> Live | None:
    """The record in `text` (the content of `live.json`), or None when it is not one: not JSON, nested, or a
    field of the wrong type (a run folder is untrusted input: `foundry.runs.records`)."""
    try:
        data = parse_json(text, source=LIVE_FILE) if len(text) < 65536 else None
    except ValueError:
        # not JSON, or nested past the limit (stackbase.bounded)
        return None
    if not isinstance(data, dict) or set(data) - set(_TYPES):
        return None
    for key, value in data.items():
        kind = _TYPES[key]
        ok = isinstance(value, int | float) if kind is float else isinstance(value, kind)
        if isinstance(value, bool) or not (ok or (value is None and key in ("token", "proof"))):
            return None
        # value != value: NaN
        if isinstance(value, float) and value != value:
            return None
    try:
        return Live(**data)
    except TypeError:
        # a required field missing
        return None
