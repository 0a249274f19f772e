"""Liveness: rank 0 keeps `<run_dir>/live.json` (pid, host, step, phase, time) fresh while a run trains.

Design note: `python -m foundry.runs` tells a running run from a dead one without a server: the record
(schema in `foundry.live`) is refreshed at most every `interval_s` seconds (and at once at fit start,
on a preemption stop and at fit end), so a reader calls a run *running* while `time` is recent (within
`stale_after(interval_s)`) and, on the same host, its pid is alive; a record that went stale in a phase
other than `done`/`preempted` is a run that died. It is registered for every training run (no config: the
cost is one small atomic write per interval) and writes only on rank 0 (the one process that also writes
`run.json` and `metrics.jsonl`). The record is replaced atomically (temp file + `os.replace`), so a reader
never sees half of it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from foundry.callbacks.base import Callback
from foundry.live import LIVE_FILE, Live
from stackbase.process import Claim, claim

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["Liveness"]


class Liveness(Callback):
    """Refreshes `<run_dir>/live.json` every `interval_s` seconds of training (rank 0 only).

    Args:
        run_dir: The run directory. interval_s: Seconds between refreshes while steps run.
        rank: This process's global rank (only rank 0 writes).
    """

    def __init__(self, run_dir: str | Path, *, interval_s: float = 10.0, rank: int = 0) -> None:
        self.path = Path(run_dir) / LIVE_FILE
        self.interval_s = interval_s
        self.rank = rank
        self.started = time.time()
        self.last_write = 0.0
        self.claim: Claim | None = None

    def _write(self, trainer: Trainer, phase: str) -> None:
        if self.rank != 0:
            return
        now = time.time()
        # claimed by the writing process itself
        if self.claim is None or self.claim.pid != os.getpid():
            self.claim = claim(self.path.parent, "rank0")
        live = Live(
            pid=os.getpid(), host=socket.gethostname(), step=int(trainer.state.step),
            max_steps=int(trainer.max_steps), phase=phase, time=round(now, 3), started=round(self.started, 3),
            attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), interval_s=self.interval_s,
            token=self.claim.token, proof=self.claim.proof,
        )  # fmt: skip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{LIVE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(live)))
        os.replace(tmp, self.path)
        self.last_write = now

    def on_fit_start(self, trainer: Trainer) -> None:
        self.started = time.time()
        self._write(trainer, "fit")

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        if getattr(trainer, "stop_requested", False):
            # the checkpoint follows; then the process exits 75
            self._write(trainer, "preempted")
        elif time.time() - self.last_write >= self.interval_s:
            self._write(trainer, "step")
        return {}

    def on_fit_end(self, trainer: Trainer) -> None:
        self._write(trainer, "done")
