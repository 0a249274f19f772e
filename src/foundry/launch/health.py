"""Health checks every rank runs before each (re)start: devices, a collective all-reduce, disk, stores.

Design note: each check is a small function returning `None` or raising `HealthError(check, detail)`; the
worker entry runs them in order and records one `health` event per rank naming the node, the rank and the
first failing check. The all-reduce uses its own gloo group on a prefixed view (`foundry-health/`) of the
round's store, so it never touches the default process group `train.py` creates afterwards. The launcher
runs torchrun with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`: every rendezvous round then gets a fresh store at
a fresh MASTER_PORT, hosted by rank 0 (a multi-tenant TCPStore, which `train.py`'s `env://` store on rank 0
joins while the health check's is kept alive), so all nodes agree on the keys without a per-attempt prefix.
Under torchrun's shared agent store (a long-lived server), the keys carry the attempt instead: right on one
node, but nodes count restarts differently after a membership change (issue 16).
"""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from streaming.storage import is_remote, list_files

__all__ = ["HealthError", "check_all_reduce", "check_devices", "check_disk", "check_store"]


class HealthError(RuntimeError):
    """A failed check: `check` names it (devices, all_reduce, disk, store)."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"health check {check!r} failed: {detail}")
        self.check, self.detail = check, detail


def check_devices(*, cuda: bool) -> None:
    """CPU arithmetic works; with `cuda`, this rank's GPU (LOCAL_RANK) is visible and computes."""
    if int((torch.ones(4) + 1).sum().item()) != 8:
        raise HealthError("devices", "CPU arithmetic gave a wrong result")
    if not cuda:
        return
    local = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local >= count:
        raise HealthError("devices", f"LOCAL_RANK={local} but {count} CUDA device(s) visible")
    x = torch.ones(64, 64, device=f"cuda:{local}")
    if float((x @ x).sum().item()) != 64.0**3:
        raise HealthError("devices", f"cuda:{local} matmul gave a wrong result")


def check_all_reduce(*, attempt: int, timeout_s: float = 60.0) -> dist.Store | None:
    """A gloo all-reduce of ones across all ranks sums to the world size (skipped for a single rank).

    Returns:
        The store it used (None for one rank). Keep it until `train.py` has created its process group: on
        rank 0 without the agent store it hosts the round's store server, which `train.py` then shares.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return None
    rank = int(os.environ["RANK"])
    timeout = datetime.timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        base = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0 and not agent_store,
            timeout=timeout, multi_tenant=True,
        )  # fmt: skip
        store = dist.PrefixStore(f"foundry-health/{attempt}" if agent_store else "foundry-health", base)
        group = dist.ProcessGroupGloo(store, rank, world, timeout)
        t = torch.ones(1)
        group.allreduce([t]).wait()  # type: ignore[attr-defined]  # in the C++ binding, not the stub
    except Exception as e:
        # any failure of the collective is the finding
        raise HealthError("all_reduce", f"{type(e).__name__}: {e}") from e
    if int(t.item()) != world:
        raise HealthError("all_reduce", f"sum of ones was {t.item()}, expected {world}")
    return base


def check_disk(run_dir: Path, *, min_free_gb: float) -> None:
    """At least `min_free_gb` free on the file system of the run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(run_dir).free / 2**30
    if free < min_free_gb:
        raise HealthError("disk", f"{free:.2f} GiB free under {run_dir}, need {min_free_gb} (--min-free-gb)")


def check_store(url: str) -> None:
    """`url` (a local folder or an object-store URL) can be listed."""
    if not is_remote(url):
        if not Path(url.removeprefix("file://")).exists():
            raise HealthError("store", f"{url}: no such folder")
        return
    try:
        list_files(url)
    except Exception as e:
        # any failure to list is the finding
        raise HealthError("store", f"{url}: listing failed: {type(e).__name__}: {e}") from e
