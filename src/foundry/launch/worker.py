"""The entry each rank runs under torchrun: health checks, a stack-dump signal, a heartbeat, then `train.py`.

Design note: torchrun's elastic agent restarts *this* entry on every (re)start, so the health checks run
before each attempt without a scheduler of our own. The launcher passes its settings in one environment
variable (`FOUNDRY_LAUNCH`, JSON) and the worker hands `train.py` the rest of the command line unchanged;
`faulthandler` is registered on SIGUSR2 so the launcher can dump this rank's Python stacks into the run dir.

Exits a restart cannot fix (a config error, exit 2; a failed device/disk/store check, exit 3) and the
preemption exit (75, after the checkpoint) must not be restarted by torchrun, which restarts on any non-zero
code. So the worker writes an exit note (`<run_dir>/heartbeat/exit-rank<R>.json`: code, cause, step) and
then *holds* (sleeps, without exiting) until the launcher, which reads the notes, stops torchrun; only if no
launcher does so within `hold_s` does it exit with the code. A failed all-reduce check exits 3 without a
note: a peer that was late or died is what a restart fixes. The launcher starts torchrun with SIGTERM and
SIGUSR1 ignored (so a scheduler signalling every process cannot make torchrun tear the ranks down mid-save);
the worker puts them back to their default first thing, so each rank handles them itself.

When a rank dies (kill -9, out of memory), the others fail in their next collective ("Connection closed by
peer"). Such an error is not this rank's fault: the worker prints one line instead of its traceback (issue 40:
a 50-line `[rank0]:` traceback came before the restart line) and leaves a `peer` exit note, so the launcher
names the rank that died first, not the lowest rank that is gone by the time it looks.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from foundry.callbacks.heartbeat import HEARTBEAT_ENV, beat_now, read_beats, write_beat
from foundry.cli import EXIT_USER_ERROR
from foundry.events import append_event
from foundry.launch.health import HealthError, check_all_reduce, check_devices, check_disk, check_store
from foundry.rundir.layout import RunDir
from foundry.train.preemption import PREEMPTION_SIGNALS, REQUEUE_EXIT_CODE

__all__ = [
    "HEALTH_EXIT_CODE",
    "LAUNCH_ENV",
    "STACK_SIGNAL",
    "ExitNote",
    "WorkerSettings",
    "main",
    "peer_failure",
    "read_exit_notes",
    "stacks_path",
    "write_exit_note",
]

LAUNCH_ENV = "FOUNDRY_LAUNCH"
STACK_SIGNAL = signal.SIGUSR2
HEALTH_EXIT_CODE = 3
RETRYABLE_CHECKS = ("all_reduce",)
"""Health checks whose failure a restart may fix (the others end the launch: see `ExitNote`)."""


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
    hold_s: float = 300.0
    """How long a rank with an exit note waits for the launcher to stop the group before exiting itself."""

    @classmethod
    def from_env(cls) -> WorkerSettings:
        raw = os.environ.get(LAUNCH_ENV)
        if not raw:
            raise SystemExit(f"{LAUNCH_ENV} is not set: start ranks with `python -m foundry.launch ...`")
        return cls(**json.loads(raw))


@dataclass(kw_only=True)
class ExitNote:
    """A rank's exit the launcher must act on instead of torchrun:
    `fatal` (stop, exit `code`) or `preempted`."""

    rank: int
    pid: int
    attempt: int
    code: int
    kind: str
    """fatal | preempted | peer (this rank failed because another one died: not acted on, only not blamed)."""
    cause: str
    """config | health | preempted | peer."""
    step: int = 0
    detail: str = ""
    check: str = ""
    """The failed health check (cause `health`)."""


def write_exit_note(directory: str | Path, note: ExitNote) -> None:
    """Atomically writes `<directory>/exit-rank<R>.json`."""
    path = Path(directory) / f"exit-rank{note.rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{note.pid}")
    tmp.write_text(json.dumps(asdict(note)))
    os.replace(tmp, path)


def read_exit_notes(directory: str | Path) -> dict[int, ExitNote]:
    """Every rank's latest exit note, by rank (any attempt: the reader filters)."""
    out: dict[int, ExitNote] = {}
    for path in sorted(Path(directory).glob("exit-rank*.json")):
        try:
            note = ExitNote(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        out[note.rank] = note
    return out


def stacks_path(run_dir: str | Path, launch_id: str, attempt: int, rank: int) -> Path:
    """Where rank `rank` of `attempt` dumps its stacks on SIGUSR2."""
    return RunDir(Path(run_dir)).stack_dump(launch_id, attempt=attempt, rank=rank)


def run_checks(settings: WorkerSettings, *, attempt: int) -> object:
    """Every health check in order; raises `HealthError` at the first that fails.

    Returns the all-reduce check's store, to keep until `train.py` has its group (`check_all_reduce`).
    """
    check_devices(cuda=settings.cuda)
    check_disk(Path(settings.run_dir), min_free_gb=settings.min_free_gb)
    for url in settings.check_urls:
        check_store(url)
    if settings.all_reduce:
        return check_all_reduce(attempt=attempt, timeout_s=settings.health_timeout_s)
    return None


def exit_note_for(
    code: int, *, rank: int, attempt: int, step: int, detail: str = "", check: str = ""
) -> ExitNote | None:
    """The note an exit code needs (None: torchrun handles it: success, or a failure a restart may fix)."""
    kind, cause = {
        EXIT_USER_ERROR: ("fatal", "config"),
        HEALTH_EXIT_CODE: ("fatal", "health"),
        REQUEUE_EXIT_CODE: ("preempted", "preempted"),
    }.get(code, ("", ""))
    if not kind:
        return None
    pid = os.getpid()
    return ExitNote(
        rank=rank, pid=pid, attempt=attempt, code=code, kind=kind, cause=cause, step=step, detail=detail,
        check=check,
    )  # fmt: skip


PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "socket closed",
    "communicator was aborted",
    "nccl communicator",
)
"""Lower-case parts of the messages gloo and NCCL raise in a rank whose peer died mid-collective."""


def peer_failure(err: BaseException) -> str | None:
    """The first line of `err` when it says a peer rank went away mid-collective, else None."""
    text = str(err)
    if not any(part in text.lower() for part in PEER_LOST):
        return None
    return next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)[:300]


def _exit(code: int, note: ExitNote | None, heartbeats: Path, hold_s: float) -> None:
    """Exits with `code`; with a note, writes it and holds first so torchrun does not restart the group."""
    if note is None:
        raise SystemExit(code)
    write_exit_note(heartbeats, note)
    deadline = time.monotonic() + hold_s
    # the launcher stops torchrun, which ends this process
    while time.monotonic() < deadline:
        time.sleep(0.5)
    raise SystemExit(code)


def main(argv: list[str]) -> None:
    """Runs the checks, then `argv[0]` (train.py) as `__main__` with `argv[1:]`; exits 3 on a failed check."""
    # ignored in torchrun (see the module note); this rank handles them
    for sig in PREEMPTION_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    settings = WorkerSettings.from_env()
    run_dir = Path(settings.run_dir)
    start = beat_now("start", 0)
    heartbeats = RunDir(run_dir).heartbeat
    dump = stacks_path(run_dir, settings.launch_id, start.attempt, start.rank)
    dump.parent.mkdir(parents=True, exist_ok=True)
    # stays open: faulthandler writes to its descriptor from the signal handler
    dump_file = dump.open("w")
    faulthandler.register(STACK_SIGNAL, file=dump_file, all_threads=True)
    write_beat(heartbeats, start)
    where = {"rank": start.rank, "node": socket.gethostname(), "attempt": start.attempt}
    # foundry.launch.nodes: which launcher's rank failed a check
    where["launch_id"] = settings.launch_id
    t0 = time.perf_counter()
    try:
        health_store = run_checks(settings, attempt=start.attempt)  # noqa: F841 - kept alive on purpose
    except HealthError as e:
        append_event(run_dir, "health", ok=False, check=e.check, detail=e.detail, **where)
        print(f"[foundry.launch] rank {start.rank} on {where['node']}: {e}", file=sys.stderr, flush=True)
        note = None
        if e.check not in RETRYABLE_CHECKS:
            note = exit_note_for(
                HEALTH_EXIT_CODE, rank=start.rank, attempt=start.attempt, step=0, detail=str(e), check=e.check
            )
        _exit(HEALTH_EXIT_CODE, note, heartbeats, settings.hold_s)
    append_event(run_dir, "health", ok=True, seconds=round(time.perf_counter() - t0, 3), **where)
    write_beat(heartbeats, beat_now("healthy", 0))
    os.environ[HEARTBEAT_ENV] = str(heartbeats)
    if not argv:
        raise SystemExit("no training script: python -m foundry.launch [options] -- train.py <overrides>")
    sys.argv = list(argv)
    # as `python train.py` would
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except Exception as e:
        # only a peer's death is handled here; anything else is re-raised
        lost = peer_failure(e)
        if lost is None:
            raise
        step = getattr(read_beats(heartbeats).get(start.rank), "step", 0)
        print(
            f"[foundry.launch] rank {start.rank}: stopped, a peer rank went away ({lost})",
            file=sys.stderr,
            flush=True,
        )
        write_exit_note(heartbeats, ExitNote(rank=start.rank, pid=os.getpid(), attempt=start.attempt, code=1,
                                             kind="peer", cause="peer", step=step, detail=lost))  # fmt: skip
        raise SystemExit(1) from None
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code != 0:
            step = getattr(read_beats(heartbeats).get(start.rank), "step", 0)
            note = exit_note_for(code, rank=start.rank, attempt=start.attempt, step=step)
            _exit(code, note, heartbeats, settings.hold_s)
    _mark_done(heartbeats, start.rank)


def _mark_done(heartbeats: Path, rank: int) -> None:
    """A `done` beat after a normal exit (a script without the heartbeat callback never wrote one)."""
    beat = read_beats(heartbeats).get(rank)
    if beat is None or beat.pid != os.getpid() or beat.phase != "done":
        write_beat(heartbeats, beat_now("done", beat.step if beat is not None else 0))


if __name__ == "__main__":
    main(sys.argv[1:])
