"""Node exclusion: a node that fails a node-local health check leaves the elastic job; the others go on.

Design note: under `--nnodes=MIN:MAX` torchrun's c10d rendezvous lets the job continue with fewer nodes, but
only if a failing node leaves the *right* way. An agent whose workers keep failing restarts them (each
restart re-rendezvouses and stops the healthy nodes' workers too) and, once out of restarts, returns
normally, which *closes* the rendezvous for everyone: the whole job ends. An agent stopped by a signal
instead shuts its workers down without closing the rendezvous (torch.distributed.launcher.api: "when the
agent dies with a signal do NOT shutdown the rdzv_handler"); the survivors' next rendezvous drops it once
its keep-alive lapses (3 x 5 s) and, with at least MIN nodes, starts the next round without it. `train.py`
then autoresumes from the latest checkpoint on fewer ranks with the same global batch (elastic resume).

So, for an elastic job (`--nnodes=MIN:MAX`, MIN < MAX; on one node a failed check simply ends the run), the
launcher (1) runs the node-local checks (disk, stores) itself before joining, and does not join when
one fails, and (2) while torchrun runs, a `NodeGuard` thread reads `events.jsonl` for a failed node-local
check of one of *its own* ranks (`launch_id`) and stops its torchrun agent by a signal. Either way it records
a `node_excluded` event naming the node and the check, prints it on stderr and exits `NODE_EXCLUDED_EXIT`. A
failed `all_reduce` check does not exclude a node: it cannot tell which node is at fault.

The rendezvous store lives in one agent (c10d backend); a node that may be excluded must not host it
(`--rdzv-conf=is_host=false`), or use an external store.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from foundry.events import EVENTS_FILE, append_event
from foundry.launch.health import HealthError, check_disk, check_store
from foundry.launch.worker import WorkerSettings

__all__ = [
    "NODE_CHECKS",
    "NODE_EXCLUDED_EXIT",
    "NodeGuard",
    "check_node",
    "elastic_nodes",
    "exclude_node",
    "node_failure",
    "stop_agent",
]

NODE_CHECKS = frozenset({"devices", "disk", "store"})
"""Checks whose failure is this node's fault (all_reduce involves every node)."""
NODE_EXCLUDED_EXIT = 4


def elastic_nodes(torchrun_options: list[str]) -> bool:
    """True for `--nnodes=MIN:MAX` with MIN < MAX: a job that may go on without a node (else exclusion is off
    and a failed check is the run's failure, as on one node)."""
    value = None
    for i, opt in enumerate(torchrun_options):
        if opt.startswith("--nnodes="):
            value = opt.split("=", 1)[1]
        elif opt == "--nnodes" and i + 1 < len(torchrun_options):
            value = torchrun_options[i + 1]
    if value is None or ":" not in value:
        return False
    low, high = value.split(":", 1)
    return low.strip().isdigit() and high.strip().isdigit() and int(low) < int(high)


def check_node(settings: WorkerSettings) -> HealthError | None:
    """The node-local checks the launcher can run itself before joining (disk, stores); the first failure."""
    try:
        check_disk(Path(settings.run_dir), min_free_gb=settings.min_free_gb)
        for url in settings.check_urls:
            check_store(url)
    except HealthError as e:
        return e
    return None


def node_failure(events: list[dict[str, Any]], launch_id: str) -> dict[str, Any] | None:
    """The first failed node-local health check of one of this launch's ranks, or None."""
    for e in events:
        if (
            e.get("event") == "health"
            and not e.get("ok", True)
            and e.get("launch_id") == launch_id
            and e.get("check") in NODE_CHECKS
        ):
            return e
    return None


def exclude_node(run_dir: Path, launch_id: str, *, check: str, detail: str, when: str) -> dict[str, Any]:
    """Records `node_excluded` (node, check, detail, `when`: before_join | after_start) and says it on
    stderr."""
    node = socket.gethostname()
    print(
        f"[foundry.launch] node {node} (launch {launch_id}) leaves the job: health check {check!r} failed: "
        f"{detail}",
        file=sys.stderr,
        flush=True,
    )
    return append_event(
        run_dir, "node_excluded", node=node, launch_id=launch_id, check=check, detail=detail, when=when
    )


def stop_agent(proc: subprocess.Popen, *, grace_s: float = 20.0) -> None:
    """Stops a torchrun agent without closing the rendezvous: a death signal it handles, else SIGKILL.

    SIGHUP first, then SIGINT: torchrun handles both as death signals (TORCHELASTIC_SIGNALS_TO_HANDLE;
    SIGTERM is left to the ranks by `foundry.launch.agent`); if it is still running, SIGKILL it and its
    workers (each leads its own process group: torchrun starts them with `start_new_session`).
    """
    for sig in (signal.SIGHUP, signal.SIGINT):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace_s / 2)
            return
        except subprocess.TimeoutExpired:
            continue
    workers = _children(proc.pid)
    proc.kill()
    for pid in workers:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc; none where there is no procfs)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


class NodeGuard:
    """Watches `events.jsonl` from a thread; on a failed node-local check of our ranks, stops our agent.

    A death signal makes torchrun's agent stop its workers and exit *without* closing the rendezvous, so
    the other nodes continue. `excluded` holds the `node_excluded` record once that happened.
    """

    def __init__(
        self,
        run_dir: Path,
        launch_id: str,
        proc: subprocess.Popen,
        *,
        poll_s: float = 0.1,
        enabled: bool = True,
    ) -> None:
        self.run_dir, self.launch_id, self.proc, self.poll_s = run_dir, launch_id, proc, poll_s
        self.enabled = enabled
        self.excluded: dict[str, Any] | None = None
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foundry-node-guard", daemon=True)

    def start(self) -> NodeGuard:
        if self.enabled:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the thread after one last look (a failure recorded just before torchrun exited counts)."""
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self.poll_s)
            failed = node_failure(self._new_events(), self.launch_id)
            if failed is not None:
                self.excluded = exclude_node(
                    self.run_dir, self.launch_id, check=failed["check"], detail=failed.get("detail", ""),
                    when="after_start",
                )  # fmt: skip
                stop_agent(self.proc)
                return
            if stopping:
                return

    def _new_events(self) -> list[dict[str, Any]]:
        """Whole lines appended since the last look (a line still being written waits for the next)."""
        path = self.run_dir / EVENTS_FILE
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out
