"""The world a dataset runs in: nodes, ranks per node, DataLoader workers per rank, and replication.

Design tradeoff: upstream trusts ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_WORLD_SIZE`` alone, so a launcher that
sets them inconsistently silently duplicates data. Here an initialized ``torch.distributed`` process group is
the source of truth and the environment is only a fallback (or a cross-check: disagreement is an error naming
both values). The local world size, which the process group does not know, comes from ``LOCAL_WORLD_SIZE`` or,
when unset, from one ``all_gather_object`` of host names. torch is only consulted if the program already
imported ``torch.distributed``, so plain single-process use never pays for it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace

__all__ = ["World"]


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class World:
    """A position in the training world.

    Attributes:
        num_nodes: Physical nodes (P).
        ranks_per_node: Ranks (devices) per node (R).
        rank: Global rank.
        workers_per_rank: DataLoader workers per rank (1 when ``num_workers=0``).
        worker: This worker's id.
        replication: Consecutive ranks that receive identical samples (tensor/sequence parallelism).
    """

    num_nodes: int = 1
    ranks_per_node: int = 1
    rank: int = 0
    workers_per_rank: int = 1
    worker: int = 0
    replication: int = 1

    def __post_init__(self) -> None:
        for name in ("num_nodes", "ranks_per_node", "workers_per_rank", "replication"):
            if getattr(self, name) < 1:
                raise ValueError(f"World.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.rank < self.num_ranks:
            raise ValueError(f"rank {self.rank} out of range for a world of {self.num_ranks} ranks")
        if not 0 <= self.worker < self.workers_per_rank:
            raise ValueError(
                f"worker {self.worker} out of range for {self.workers_per_rank} workers per rank"
            )
        if self.num_ranks % self.replication:
            raise ValueError(
                f"replication={self.replication} must divide the number of ranks ({self.num_ranks})"
            )

    @property
    def num_ranks(self) -> int:
        return self.num_nodes * self.ranks_per_node

    @property
    def node(self) -> int:
        return self.rank // self.ranks_per_node

    @property
    def rank_in_node(self) -> int:
        return self.rank % self.ranks_per_node

    @property
    def num_devices(self) -> int:
        """Devices that receive distinct samples (ranks / replication)."""
        return self.num_ranks // self.replication

    @property
    def device(self) -> int:
        """This rank's device index in the plan: ``r * P + p`` (rank-in-node major, for node locality)."""
        if self.ranks_per_node % self.replication == 0:
            return (self.rank_in_node // self.replication) * self.num_nodes + self.node
        return self.rank // self.replication

    def with_workers(self, workers_per_rank: int, worker: int) -> World:
        """This world seen from DataLoader worker ``worker`` of ``workers_per_rank``."""
        return replace(self, workers_per_rank=max(1, workers_per_rank), worker=worker)

    @classmethod
    def detect(
        cls,
        *,
        replication: int | None = None,
        env: Mapping[str, str] | None = None,
        use_process_group: bool = True,
    ) -> World:
        """The rank-level world (one worker) of this process.

        Args:
            replication: Replication factor (``None``: 1).
            env: Environment to read (default ``os.environ``).
            use_process_group: Consult an initialized ``torch.distributed`` group (off in DataLoader workers,
                where collectives are not allowed).

        Returns:
            The world.

        Raises:
            ValueError: when the process group and the environment disagree, or the sizes are inconsistent.
        """
        env = os.environ if env is None else env
        e_rank, e_size = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
        e_local = _env_int(env, "LOCAL_WORLD_SIZE")
        rank, size = e_rank, e_size
        local = e_local
        dist = sys.modules.get("torch.distributed")
        if use_process_group and dist is not None and dist.is_available() and dist.is_initialized():
            rank, size = dist.get_rank(), dist.get_world_size()
            for name, env_v, pg_v in (("RANK", e_rank, rank), ("WORLD_SIZE", e_size, size)):
                if env_v is not None and env_v != pg_v:
                    raise ValueError(
                        f"the torch.distributed process group says {name.lower()}={pg_v} but the environment "
                        f"says {name}={env_v}; fix the launcher so they agree "
                        "(the process group is what we use)"
                    )
            if local is None:
                hosts: list[str | None] = [None] * size
                dist.all_gather_object(hosts, socket.gethostname())
                local = hosts.count(socket.gethostname())
        rank = 0 if rank is None else rank
        size = 1 if size is None else size
        local = size if local is None else local
        if local < 1 or size % local:
            raise ValueError(
                f"LOCAL_WORLD_SIZE={local} must be >= 1 and divide "
                f"WORLD_SIZE={size} (same ranks on every node)"
            )
        if not 0 <= rank < size:
            raise ValueError(f"RANK={rank} out of range for WORLD_SIZE={size}")
        return cls(num_nodes=size // local, ranks_per_node=local, rank=rank, replication=replication or 1)
