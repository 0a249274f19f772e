"""The entry each rank runs under torchrun: health checks, a stack-dump signal, a heartbeat, then `train.py`.

Design note: torchrun's elastic agent restarts *this* entry on every (re)start, so the health checks run
before each attempt without a scheduler of our own. The launcher passes its settings in one environment
variable (`FOUNDRY_LAUNCH`, JSON) and the worker hands `train.py` the rest of the command line unchanged;
`faulthandler` is registered on SIGUSR2 so the launcher can dump this rank's Python stacks into the run dir.
"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from foundry.callbacks.heartbeat import HEARTBEAT_ENV, beat_now, write_beat
from foundry.launch.events import append_event
from foundry.launch.health import HealthError, check_all_reduce, check_devices, check_disk, check_store

__all__ = ["HEALTH_EXIT_CODE", "LAUNCH_ENV", "STACK_SIGNAL", "WorkerSettings", "main", "stacks_path"]

LAUNCH_ENV = "FOUNDRY_LAUNCH"
STACK_SIGNAL = signal.SIGUSR2
HEALTH_EXIT_CODE = 3


@dataclass(kw_only=True)
class WorkerSettings:
    """What the launcher tells each rank (serialized into `FOUNDRY_LAUNCH`)."""

    run_dir: str
    launch_id: str
    cuda: bool = False
    min_free_gb: float = 1.0
    check_urls: list[str] = field(default_factory=list)
    health_timeout_s: float = 60.0
    all_reduce: bool = True

    @classmethod
    def from_env(cls) -> WorkerSettings:
        raw = os.environ.get(LAUNCH_ENV)
        if not raw:
            raise SystemExit(f"{LAUNCH_ENV} is not set: start ranks with `python -m foundry.launch ...`")
        return cls(**json.loads(raw))


def stacks_path(run_dir: str | Path, launch_id: str, attempt: int, rank: int) -> Path:
    """Where rank `rank` of `attempt` dumps its stacks on SIGUSR2."""
    return Path(run_dir) / "stacks" / f"{launch_id}-attempt{attempt}-rank{rank}.txt"


def run_checks(settings: WorkerSettings, *, attempt: int) -> None:
    """Every health check in order; raises `HealthError` at the first that fails."""
    check_devices(cuda=settings.cuda)
    check_disk(Path(settings.run_dir), min_free_gb=settings.min_free_gb)
    for url in settings.check_urls:
        check_store(url)
    if settings.all_reduce:
        check_all_reduce(attempt=attempt, timeout_s=settings.health_timeout_s)


def main(argv: list[str]) -> None:
    """Runs the checks, then `argv[0]` (train.py) as `__main__` with `argv[1:]`; exits 3 on a failed check."""
    settings = WorkerSettings.from_env()
    run_dir = Path(settings.run_dir)
    start = beat_now("start", 0)
    heartbeats = run_dir / "heartbeat"
    write_beat(heartbeats, start)
    dump = stacks_path(run_dir, settings.launch_id, start.attempt, start.rank)
    dump.parent.mkdir(parents=True, exist_ok=True)
    dump_file = dump.open("w")  # stays open: faulthandler writes to its descriptor from the signal handler
    faulthandler.register(STACK_SIGNAL, file=dump_file, all_threads=True)
    where = {"rank": start.rank, "node": socket.gethostname(), "attempt": start.attempt}
    where["launch_id"] = settings.launch_id  # foundry.launch.nodes: which launcher's rank failed a check
    t0 = time.perf_counter()
    try:
        run_checks(settings, attempt=start.attempt)
    except HealthError as e:
        append_event(run_dir, "health", ok=False, check=e.check, detail=e.detail, **where)
        print(f"[foundry.launch] rank {start.rank} on {where['node']}: {e}", file=sys.stderr, flush=True)
        raise SystemExit(HEALTH_EXIT_CODE) from e
    append_event(run_dir, "health", ok=True, seconds=round(time.perf_counter() - t0, 3), **where)
    write_beat(heartbeats, beat_now("healthy", 0))
    os.environ[HEARTBEAT_ENV] = str(heartbeats)
    if not argv:
        raise SystemExit("no training script: python -m foundry.launch [options] -- train.py <overrides>")
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python train.py` would
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
