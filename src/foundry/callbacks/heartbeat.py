"""Heartbeat: each rank writes its progress (step, phase, pid, attempt) to a small file the launcher watches.

Design note: the supervised launcher (`python -m foundry.launch`) detects hangs from outside the ranks, so the
ranks only publish facts: `<dir>/rank<R>.json`, replaced atomically (write a temp file, `os.replace`) so a
reader never sees half a record. The launcher turns the callback on through the `FOUNDRY_HEARTBEAT_DIR`
environment variable (set by its worker entry), so the same `train.py` command runs with or without it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundry.callbacks.base import Callback

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["HEARTBEAT_ENV", "Beat", "Heartbeat", "read_beats", "write_beat"]

HEARTBEAT_ENV = "FOUNDRY_HEARTBEAT_DIR"


@dataclass(kw_only=True)
class Beat:
    """One rank's latest progress report."""

    rank: int
    pid: int
    attempt: int
    """torchrun's restart count (`TORCHELASTIC_RESTART_COUNT`) when the rank started."""
    phase: str
    """start | healthy | fit | step | done."""
    step: int
    time: float
    step_seconds: float = 0.0


def write_beat(directory: str | Path, beat: Beat) -> None:
    """Atomically replaces `<directory>/rank<R>.json` with `beat`."""
    path = Path(directory) / f"rank{beat.rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{beat.pid}")
    tmp.write_text(json.dumps(asdict(beat)))
    os.replace(tmp, path)


def read_beats(directory: str | Path) -> dict[int, Beat]:
    """The latest beat of every rank that has written one, by rank."""
    out: dict[int, Beat] = {}
    for path in sorted(Path(directory).glob("rank*.json")):
        try:
            beat = Beat(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            # removed between glob and read
            continue
        out[beat.rank] = beat
    return out


def beat_now(phase: str, step: int, *, step_seconds: float = 0.0) -> Beat:
    """A beat for this process from torchrun's environment (rank 0, attempt 0 outside torchrun)."""
    return Beat(
        rank=int(os.environ.get("RANK", "0")),
        pid=os.getpid(),
        attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        phase=phase,
        step=step,
        time=time.time(),
        step_seconds=step_seconds,
    )


class Heartbeat(Callback):
    """Writes this rank's beat at fit start (the resumed step), after every step and at fit end."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def on_fit_start(self, trainer: Trainer) -> None:
        write_beat(self.directory, beat_now("fit", trainer.state.step))

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        write_beat(self.directory, beat_now("step", trainer.state.step, step_seconds=step_seconds))
        return {}

    def on_fit_end(self, trainer: Trainer) -> None:
        write_beat(self.directory, beat_now("done", trainer.state.step))
