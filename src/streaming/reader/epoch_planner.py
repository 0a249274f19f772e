"""``EpochPlanner``: a rank's world, the global order of its epochs, and where the next iteration starts.

Design note: the iteration bookkeeping of ``StreamingDataset``, kept apart from its streams, random access and
resume-state contents. It holds what lives in the rank process: the epoch counter (``epoch``/``drop``: where
the next iteration starts; ``iter_epoch``/``iter_drop``: the iteration running now, which a state is saved
against), what a loaded state fixes (canonical nodes, initial physical nodes, global batch size), and a
one-epoch cache of the global order. Workers only ever hold copies, so the loader advances the rank's counter
(``begin_epoch``). The cache is never pickled (spawned workers recompute it); forked workers inherit the
windows ``warm`` computed. Every order is a pure function of the plan arguments, the world and the epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from streaming.plan import GlobalOrder, PlanSpec, WorkerPlan, epoch_order
from streaming.plan.partition import DeviceSlice, check_partition
from streaming.reader.world import World

__all__ = ["EpochPlanner"]


@dataclass
class EpochPlanner:
    """One rank's epochs of a dataset: world, global orders, epoch counter and the facts a state fixes.

    Attributes:
        spec_args: ``PlanSpec`` fields other than ``num_canonical_nodes`` and ``global_batch_size`` (the
            world-dependent ones, filled in by ``spec``).
        batch_size: Per-device batch size (None: the dataset is not iterable, random access only).
        partition_algo: ``relaxed`` or ``orig``.
        ncn_arg: The ``num_canonical_nodes`` argument (None: from a loaded state, else the world's default).
        replication: Consecutive ranks that get identical samples (for world detection).
        world: This rank's world (None: detected on first use).
        ncn_state / initial_nodes / expected_gbs: What a loaded state fixes (``restore``).
        epoch / drop: The epoch the next iteration runs and the samples of it already consumed.
        iter_epoch / iter_drop: The same for the iteration running now (None: none started).
    """

    spec_args: dict[str, Any]
    batch_size: int | None
    partition_algo: str
    ncn_arg: int | None
    replication: int | None
    world: World | None = None
    ncn_state: int | None = None
    initial_nodes: int | None = None
    expected_gbs: int | None = None
    epoch: int = 0
    drop: int = 0
    iter_epoch: int | None = None
    iter_drop: int = 0
    orders: dict[tuple[int, int], GlobalOrder] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "orders": {}}

    def rank_world(self) -> World:
        """This rank's world (detected once; inside a DataLoader worker without touching the process
        group)."""
        if self.world is None:
            self.world = World.detect(
                replication=self.replication, use_process_group=get_worker_info() is None
            )
        return self.world

    @property
    def num_canonical_nodes(self) -> int:
        """C: from the loaded state, the argument, or the default for this world."""
        if self.ncn_state is not None:
            return self.ncn_state
        if self.ncn_arg is not None:
            return self.ncn_arg
        nodes = self.initial_nodes or self.rank_world().num_nodes
        return 64 * nodes if self.spec_args["shuffle_algo"] in ("py1s", "py2s") else nodes

    def global_batch_size(self) -> int | None:
        """Devices x per-device batch size in this world (None without a batch size)."""
        return self.batch_size * self.rank_world().num_devices if self.batch_size else None

    def spec(self, num_canonical_nodes: int | None = None) -> PlanSpec:
        """The plan of this world, with ``num_canonical_nodes`` (default: ``self.num_canonical_nodes``)."""
        ncn = self.num_canonical_nodes if num_canonical_nodes is None else num_canonical_nodes
        shape = None
        # the one world-dependent order
        if self.spec_args.get("batching_method") == "device_per_stream":
            world = self.rank_world()
            if world.ranks_per_node % world.replication:
                raise ValueError(
                    "batching_method='device_per_stream' needs replication to divide ranks per node"
                )
            shape = (world.num_nodes, world.ranks_per_node // world.replication)
        return PlanSpec(
            **self.spec_args,
            num_canonical_nodes=ncn,
            global_batch_size=self.global_batch_size(),
            world_shape=shape,
        )

    def order(self, epoch: int) -> GlobalOrder:
        """The global order of ``epoch`` (the last one computed is cached)."""
        key = (epoch, self.num_canonical_nodes)
        order = self.orders.get(key)
        if order is None:
            self.orders.clear()
            order = self.orders[key] = epoch_order(self.spec(), epoch)
        return order

    def next(self) -> tuple[int, int]:
        """The (epoch, offset) the next iteration starts at (a finished epoch rolls over)."""
        epoch, drop = self.epoch, self.drop
        if drop and drop >= len(self.order(epoch)):
            epoch, drop = epoch + 1, 0
        return epoch, self.order(epoch).start(drop) if drop else drop

    def begin_epoch(self) -> tuple[int, int]:
        """Starts the next iteration: returns its (epoch, offset); the one after runs the following epoch."""
        epoch, drop = self.next()
        self.iter_epoch, self.iter_drop = epoch, drop
        self.epoch, self.drop = epoch + 1, 0
        return epoch, drop

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        self.epoch, self.drop = int(epoch), 0

    def position(self) -> tuple[int, int]:
        """(epoch, offset) a state counts consumed samples from:
        the running iteration's, else the next one's."""
        return self.next() if self.iter_epoch is None else (self.iter_epoch, self.iter_drop)

    def restore(self, obj: dict[str, Any]) -> None:
        """Applies a checked resume state: the next iteration continues where it was saved."""
        self.ncn_state = obj["num_canonical_nodes"]
        self.initial_nodes = obj.get("initial_physical_nodes")
        self.expected_gbs = obj.get("global_batch_size")
        self.epoch, self.drop = int(obj["epoch"]), int(obj["sample_in_epoch"])
        self.iter_epoch = None

    def device_slice(self, epoch: int, drop: int) -> DeviceSlice:
        """This rank's share of ``epoch`` after its first ``drop`` samples."""
        world = self.rank_world()
        total = max(0, len(self.order(epoch)) - drop)
        return DeviceSlice(total=total, num_devices=world.num_devices, device=world.device)

    def check_iterable(self) -> World:
        """This rank's world, after checking it can iterate
        (batch size, partition, a loaded state's batch)."""
        if self.batch_size is None:
            raise ValueError(
                "Please pass `batch_size` to StreamingDataset to iterate (the per-device batch size, equal "
                "to the DataLoader's batch_size); random access works without it"
            )
        world = self.rank_world()
        check_partition(
            partition_algo=self.partition_algo,
            num_canonical_nodes=self.num_canonical_nodes,
            num_physical_nodes=world.num_nodes,
        )
        if self.initial_nodes is None:
            self.initial_nodes = world.num_nodes
        gbs = self.batch_size * world.num_devices
        if self.expected_gbs is not None and gbs != self.expected_gbs:
            raise ValueError(
                f"the loaded state was saved with global batch size {self.expected_gbs}, but this run has "
                f"{gbs} (batch_size={self.batch_size} x {world.num_devices} devices); keep the global batch "
                "size fixed to resume (change batch_size accordingly)"
            )
        return world

    def iteration(self, chunk: int) -> Iterator[np.ndarray]:
        """Starts an iteration in this process (a rank, or one of its DataLoader workers): the sample ids it
        reads, in chunks of up to ``chunk``."""
        world = self.check_iterable()
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        epoch, drop = self.begin_epoch()
        return self.worker_plan(world, self.order(epoch), drop, workers, worker).batches(chunk=chunk)

    def worker_plan(
        self, world: World, order: GlobalOrder, drop: int, workers: int, worker: int
    ) -> WorkerPlan:
        """What DataLoader worker ``worker`` of ``workers`` on this rank reads of ``order`` after ``drop``."""
        return WorkerPlan(
            order=order,
            drop_first=drop,
            num_devices=world.num_devices,
            device=world.device,
            batch_size=self.batch_size,  # type: ignore[arg-type]
            num_workers=workers,
            worker=worker,
        )

    def warm(self, num_workers: int) -> None:
        """Compute (in the rank process) the shuffle blocks behind each worker's first batch, so forked
        workers inherit them instead of all computing the same window at once on a busy CPU."""
        world = self.check_iterable()
        epoch, drop = self.next()
        order = self.order(epoch)
        for worker in range(num_workers):
            next(self.worker_plan(world, order, drop, num_workers, worker).batches(), None)
