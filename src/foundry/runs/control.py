"""`runs stop RUN` and `runs resume RUN`: act on a run through the preemption path and its autoresume.

Design note: stopping reuses the preemption path rather than inventing one: SIGTERM to the supervised
launcher (its pid is in the `start` event of events.jsonl), which forwards it to torchrun, which passes it to
the ranks; each rank checkpoints at the next step boundary and exits 75. A run started without the launcher
gets SIGTERM on rank 0's pid from live.json (the ranks agree on the stop with an all-reduce). `stop` first
appends a `stop` event, so the launcher's non-zero summary afterwards reads as *preempted*, not failed.
Resuming needs no state of ours: the same command with the same `run_name` autoresumes from the latest
checkpoint, so `resume` prints that command (from `.hydra/rank0/overrides.yaml` and events.jsonl), with
`checkpoint.save_folder` pointed at another store or another world size when asked.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundry.events import append_event
from foundry.rundir import layout
from foundry.runs.records import yaml_list
from foundry.runs.state import RunFiles
from foundry.runs.store import RunRoot
from stackbase.process import pid_alive, verify

__all__ = ["StopTarget", "resume_command", "stop_run", "stop_target"]


@dataclass(kw_only=True)
class StopTarget:
    """The process `stop` signals: the launcher, or rank 0 of a run started without it."""

    pid: int
    what: str


def _launch(events: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, bool]:
    """(the last `start` event, whether a `summary` followed it)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    if not starts:
        return None, False
    tail = events[starts[-1] :]
    return events[starts[-1]], any(e.get("event") == "summary" for e in tail)


def _launcher_pid(start: dict[str, Any]) -> int | None:
    if isinstance(start.get("pid"), int):
        return int(start["pid"])
    # launch ids end in the launcher's pid
    tail = str(start.get("launch_id", "")).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _check_identity(
    files: RunFiles, folder: str, what: str, pid: object, host: str | None, proof: object
) -> None:
    """Refuse to signal `pid` unless it proves it is this run's process (`stackbase.process.verify`: a claim
    in this user's registry for this folder, same start time and command line). A run folder is untrusted:
    one synced from a bucket, forged in a shared `outputs/`, or naming a pid reused after a crash, names
    someone else's process."""
    here = socket.gethostname()
    if host is not None and host != here:
        raise ProcessLookupError(
            f"{files.name}: its {what} runs on host {host!r}; run `runs stop` there (signals are local)"
        )
    why = verify(pid, folder, proof)
    if why is not None:
        raise ProcessLookupError(f"{files.name}: not running here: the {what}'s {why}; nothing was signalled")


def stop_target(files: RunFiles, folder: str) -> StopTarget:
    """Which process to signal (the run's local `folder`); raises ProcessLookupError naming why there is none
    (finished, elsewhere, or a pid that cannot prove it is the run's process)."""
    start, ended = _launch(files.events)
    if start is not None and not ended:
        pid = _launcher_pid(start)
        if (
            pid is not None
            and start.get("host", socket.gethostname()) == socket.gethostname()
            and pid_alive(pid)
        ):
            _check_identity(files, folder, "launcher", pid, start.get("host"), start.get("proof"))
            return StopTarget(pid=pid, what="launcher")
    live = files.live
    if live is None:
        raise ProcessLookupError(f"{files.name}: no live.json and no running launcher: nothing to stop")
    if live.phase in ("done", "preempted"):
        raise ProcessLookupError(f"{files.name}: not running (live.json: phase {live.phase}, pid {live.pid})")
    _check_identity(files, folder, "rank 0", live.pid, live.host, live.proof)
    return StopTarget(pid=live.pid, what="rank 0")


def stop_run(root: RunRoot, files: RunFiles) -> StopTarget:
    """Records a `stop` event and sends SIGTERM (checkpoint at the next step, exit 75); local runs only."""
    if root.remote:
        raise ValueError(f"{root.root}: `runs stop` needs the run's local folder on the machine running it")
    target = stop_target(files, root.url(files.name))
    append_event(root.url(files.name), "stop", pid=target.pid, target=target.what, signal="SIGTERM")
    os.kill(target.pid, signal.SIGTERM)
    return target


def _set(overrides: list[str], key: str, value: str) -> list[str]:
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    return [*kept, f"{key}={value}"]


def _hydra_quote(value: str) -> str:
    """`value` as one Hydra override value: double-quoted when it holds characters the grammar reads
    (a comma would make a sweep of a Hydra job folder named after its overrides)."""
    if not any(c in value for c in ",=[]{}()'\" :$\\"):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _nproc(options: list[str], n: int) -> list[str]:
    kept, skip = [], False
    for o in options:
        if skip:
            skip = False
            continue
        if o in ("--nproc-per-node", "--nproc_per_node"):
            skip = True
            continue
        if not o.startswith(("--nproc-per-node=", "--nproc_per_node=")):
            kept.append(o)
    return [*kept, f"--nproc-per-node={n}"]


def resume_command(
    root: RunRoot, files: RunFiles, *, store: str | None = None, nproc: int | None = None
) -> list[str]:
    """The command line that continues the run (autoresume: same overrides, same run_name).

    Args:
        store: Another checkpoint folder/URL to continue from (after `python -m foundry.sync` copied it).
        nproc: Ranks per node for the continued run (the global batch stays; checkpoints reshard on load).
    """
    rel_file = f"{layout.HYDRA}/rank0/overrides.yaml"
    overrides = yaml_list(root.read_text(files.name, rel_file), source=f"{files.name}/{rel_file}") or []
    run_name = str(files.run.get("config", {}).get("run_name") or files.name.rsplit("/", 1)[-1])
    overrides = _set(overrides, "run_name", run_name)
    if store:
        overrides = _set(overrides, "checkpoint.save_folder", store)
    here = Path(root.url(files.name)).resolve()
    # a sweep job, or a moved folder
    if not root.remote and here != Path(layout.OUTPUTS, run_name).resolve():
        overrides = _set(overrides, "hydra.run.dir", _hydra_quote(str(here)))
    start, _ = _launch(files.events)
    if start is not None:
        opts = [str(o) for o in start.get("torchrun_options", [])]
        opts = _nproc(opts, nproc) if nproc else opts
        launcher = ["python", "-m", "foundry.launch", f"--max-restarts={start.get('max_restarts', 3)}"]
        return [*launcher, *opts, "--", str(start.get("script", "train.py")), *overrides]
    world = int(files.run.get("derived", {}).get("world_size", 1))
    n = nproc or world
    if n > 1:
        return ["torchrun", "--standalone", f"--nproc-per-node={n}", "train.py", *overrides]
    return ["python", "train.py", *overrides]


def format_command(cmd: list[str]) -> str:
    """`cmd` as one shell line."""
    return shlex.join(cmd)
