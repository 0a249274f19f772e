"""The process group of a run: the device, init from the `torchrun` environment, the world,
collectives, teardown.

Design note: `torchrun` (single node, or multi-node through its c10d rendezvous) sets `RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`; `init_distributed` reads them once and
returns a frozen `DistContext` that travels as a value (no global state of ours). `process_world` is the one
way a task learns its `streaming.reader.world.World` (nodes, ranks, this rank): from the context once the
group exists, or from the environment before it does; the world is then passed down, never detected again. A
DDP/FSDP config run as a plain `python train.py` gets a 1-rank group on an in-memory store, so every strategy
also runs without torchrun. A group that already exists (a test harness made it) is used and left alone at
teardown. The collective helpers are no-ops without a group, so the trainer calls them unconditionally.

Teardown frees what still holds the group before destroying it: a `DistributedDataParallel` left in a
reference cycle was collected after `destroy_process_group` (at exit, by a collection inside an atexit hook),
so its reducer dropped the last reference to the gloo group, whose destructor, holding the GIL, waited for a
worker thread that needed the GIL to free a finished broadcast's tensors: a 2-rank DDP run hung after training
(seen once in the dist tier, 2026-11-29). `teardown` collects such cycles while the group is still registered,
and a run that every rank finished ends at a barrier first (`foundry.tasks.pretrain`), whose wait lets the
group's worker threads finish with the GIL released.

Group keys across torchrun restarts: by default torchrun shares its agent's TCPStore with the workers
(`TORCHELASTIC_USE_AGENT_STORE=True`); that server outlives a group restart, so the default group's keys are
prefixed with `TORCHELASTIC_RESTART_COUNT` (else restarted gloo ranks read the dead group's addresses). The
count is per node, and after a membership change the nodes' counts differ (issue 16), so
`python -m foundry.launch` sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`: each rendezvous round then gets a
fresh store at a fresh MASTER_PORT (`env://`, hosted by rank 0) and needs no prefix. Plain multi-node
torchrun with restarts and the shared store gets a warning naming that variable.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from foundry.parallel.config import ParallelismConfig
from streaming.reader.world import World

__all__ = [
    "SHARED_STORE_WARNING",
    "DistContext",
    "rank",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "init_distributed",
    "process_world",
    "resolve_backend",
    "resolve_device",
    "teardown",
    "world_size",
]


SHARED_STORE_WARNING = (
    "several nodes restart under torchrun's shared agent store: after a membership change the nodes' "
    "TORCHELASTIC_RESTART_COUNT differ and the group's keys (per restart) never meet; set "
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (python -m foundry.launch does) for a fresh store per round"
)


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run: ranks, the device it trains on, and whether it owns the group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False
    """True when `init_distributed` created the process group (so `teardown` destroys it)."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes run metadata, logs and the console."""
        return self.rank == 0


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    try:
        return int(raw) if raw != "" else default
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; other names as given (`trainer.device`)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "trainer.device=cuda but no CUDA device is available; use trainer.device=auto or cpu"
        )
    return torch.device(name)


def process_world(ctx: DistContext | None = None) -> World:
    """This process's place in the training world, as the data pipeline and the task see it.

    Args:
        ctx: The context `init_distributed` returned; None before the process group exists (the task
            dispatcher deciding who writes the run's files), when the torchrun environment is read instead.

    Raises:
        ValueError: The local world size does not divide the world size (a launcher mistake).
    """
    if ctx is None:
        return World.detect()
    if ctx.local_world_size < 1 or ctx.world_size % ctx.local_world_size:
        raise ValueError(
            f"LOCAL_WORLD_SIZE={ctx.local_world_size} must be >= 1 and divide WORLD_SIZE={ctx.world_size} "
            "(same ranks on every node)"
        )
    return World(
        num_nodes=ctx.world_size // ctx.local_world_size, ranks_per_node=ctx.local_world_size, rank=ctx.rank
    )


def resolve_backend(backend: str, *, device: torch.device) -> str:
    """`auto` -> nccl on CUDA, gloo otherwise; nccl on a non-CUDA device is an error naming the fix."""
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(
            f"parallelism.backend=nccl needs CUDA (device is {device}); use backend=gloo or auto"
        )
    return backend


def init_distributed(
    cfg: ParallelismConfig,
    *,
    device: torch.device,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 1800.0,
) -> DistContext:
    """Joins (or creates) the process group the environment describes and picks this rank's device.

    Args:
        cfg: The parallelism config (strategy and backend).
        device: The configured device; `cuda` becomes `cuda:<LOCAL_RANK>` (and is made current).
        env: Environment to read (default `os.environ`).
        timeout_s: Collective timeout.

    Returns:
        The context; without a group (strategy `none`, one process) it describes a 1-rank world.

    Raises:
        ValueError: Several processes but `strategy=none`, or a backend that cannot run on the device.
    """
    env = os.environ if env is None else env
    world_size = _env_int(env, "WORLD_SIZE", 1)
    rank = _env_int(env, "RANK", 0)
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", world_size)
    if world_size > 1 and not cfg.distributed:
        raise ValueError(
            f"WORLD_SIZE={world_size} (torchrun) but parallelism.strategy=none would train {world_size} "
            "independent copies; use parallelism=ddp or parallelism=fsdp (or run a single process)"
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_available() and dist.is_initialized():
        size = dist.get_world_size()
        return DistContext(
            rank=dist.get_rank(),
            world_size=size,
            local_rank=local_rank,
            # one node unless the launcher says
            local_world_size=_env_int(env, "LOCAL_WORLD_SIZE", size),
            device=device,
        )
    if not cfg.distributed:
        return DistContext(device=device)
    backend = resolve_backend(cfg.backend, device=device)
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
    if device.type == "cuda":
        kwargs["device_id"] = device
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent store outlives a group restart:
        # keys per restart, or restarted ranks read the dead group's addresses (gloo: connection refused)
        if local_world < world_size and _env_int(env, "TORCHELASTIC_MAX_RESTARTS", 0) > 0:
            warnings.warn(SHARED_STORE_WARNING, stacklevel=2)
        agent = dist.TCPStore(
            env["MASTER_ADDR"], int(env["MASTER_PORT"]), world_size, False, timeout=kwargs["timeout"]
        )
        store = dist.PrefixStore(f"foundry/restart{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", agent)
        dist.init_process_group(store=store, rank=rank, world_size=world_size, **kwargs)
    elif "MASTER_ADDR" in env:
        # torchrun: env:// rendezvous (multi-node through c10d)
        dist.init_process_group(init_method="env://", rank=rank, world_size=world_size, **kwargs)
    else:
        # a DDP/FSDP config in a plain single process: a 1-rank group on an in-memory store
        if world_size != 1:
            raise ValueError(f"WORLD_SIZE={world_size} but MASTER_ADDR is unset; launch with torchrun")
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    return DistContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world,
        device=device,
        owns_group=True,
    )


def teardown(ctx: DistContext) -> None:
    """Destroys the process group if `init_distributed` created it, after collecting the unreachable objects
    that still hold it (see the module note)."""
    if ctx.owns_group and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Waits for every rank (no-op without a multi-rank group)."""
    if _active():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums `tensor` over ranks in place and returns it (unchanged without a multi-rank group)."""
    if _active():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(obj: Any, *, src: int = 0) -> Any:
    """Rank `src`'s `obj` (any picklable value) on every rank (unchanged without a multi-rank group)."""
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def rank() -> int:
    """This process's rank in the process group (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Ranks in the process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
