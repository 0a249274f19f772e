"""The per-worker epoch plan: which sample ids one DataLoader worker yields, batch by batch, computed lazily.

Design tradeoff: upstream's node leader computes the whole world's plan and hands it over in /dev/shm. Here
every worker builds only the O(shards) tables of the epoch (``PlanSpec`` -> ``epoch_order``) and evaluates its
own strided slice in chunks as it goes (``WorkerPlan.batches``), so the first sample costs one shuffle block,
memory is bounded by a few cached blocks, there is no cross-process hand-off to go stale, and resuming at
sample s costs the same as starting (the slice just starts at s).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from streaming.plan.batching import (
    BATCHING_METHODS,
    GlobalOrder,
    PerStreamOrder,
    RandomOrder,
    StratifiedOrder,
)
from streaming.plan.device_per_stream import DevicePerStreamOrder
from streaming.plan.partition import DeviceSlice, worker_batches
from streaming.plan.sampling import Units, allocate_shards, build_units, epoch_sampling_seed

__all__ = ["PlanSpec", "WorkerPlan", "default_block_size", "epoch_order", "epoch_units"]


def default_block_size(num_canonical_nodes: int) -> int:
    """Upstream's default ``shuffle_block_size``: ``max(4_000_000 // C, 262144)``."""
    return max(4_000_000 // max(num_canonical_nodes, 1), 1 << 18)


@dataclass(frozen=True)
class PlanSpec:
    """Everything (but the world) that decides an epoch's global order.

    Attributes:
        shard_sizes: Samples per shard, all streams' shards concatenated in stream order.
        shards_per_stream: Number of shards of each stream.
        choose_per_stream: Per-epoch samples of each stream (``stream_choose``).
        num_canonical_nodes: C.
        global_batch_size: G (devices x device batch); needed by ``per_stream`` / ``stratified``.
        shuffle: Whether to shuffle.
        shuffle_algo: One of ``naive, py1s, py2s, py1br, py1e``.
        shuffle_seed: Seed.
        shuffle_block_size: Block size (``None``: ``default_block_size(C)``).
        sampling_method: ``balanced`` or ``fixed``.
        sampling_granularity: Pick size of the per-shard remainder.
        batching_method: ``random``, ``stratified``, ``per_stream`` or ``device_per_stream``.
        world_shape: (physical nodes, devices per node);
            ``device_per_stream`` only, whose order depends on it.
        py1e_window: ``py1e`` window override (tests).
        upstream_order: Shuffle in mosaicml-streaming's own order (``streaming.plan.upstream_shuffle``): a run
            that started on that library continues in it.
    """

    shard_sizes: tuple[int, ...]
    shards_per_stream: tuple[int, ...]
    choose_per_stream: tuple[int, ...]
    num_canonical_nodes: int
    global_batch_size: int | None = None
    shuffle: bool = False
    shuffle_algo: str = "py1e"
    shuffle_seed: int = 9176
    shuffle_block_size: int | None = None
    sampling_method: str = "balanced"
    sampling_granularity: int = 1
    batching_method: str = "random"
    world_shape: tuple[int, int] | None = None
    py1e_window: int | None = None
    upstream_order: bool = False

    def __post_init__(self) -> None:
        if self.batching_method not in BATCHING_METHODS:
            raise ValueError(
                f"batching_method must be one of {BATCHING_METHODS}, got {self.batching_method!r}"
            )
        if len(self.shards_per_stream) != len(self.choose_per_stream):
            raise ValueError("shards_per_stream and choose_per_stream need one entry per stream")
        if sum(self.shards_per_stream) != len(self.shard_sizes):
            raise ValueError("shards_per_stream does not add up to the number of shards")
        if self.shuffle_seed < 0:
            raise ValueError(f"shuffle_seed must be >= 0, got {self.shuffle_seed}")
        if self.batching_method != "random" and not self.global_batch_size:
            raise ValueError(f"batching_method={self.batching_method!r} needs the global batch size")
        if self.batching_method == "device_per_stream":
            if self.world_shape is None:
                raise ValueError(
                    "batching_method='device_per_stream' needs the world shape (nodes, devices per node)"
                )
            if (self.global_batch_size or 0) % (self.world_shape[0] * self.world_shape[1]):
                raise ValueError("the global batch size must be a multiple of the number of devices")

    @property
    def block_size(self) -> int:
        bs = self.shuffle_block_size
        return default_block_size(self.num_canonical_nodes) if bs is None else int(bs)


def epoch_units(spec: PlanSpec, epoch: int) -> Units:
    """The shuffle units of ``epoch`` (per-shard allocation of every stream)."""
    seed = epoch_sampling_seed(
        seed=spec.shuffle_seed, epoch=epoch, sampling_method=spec.sampling_method, shuffle=spec.shuffle
    )
    sizes = np.asarray(spec.shard_sizes, dtype=np.int64)
    allocs, at = [], 0
    for s, (n, choose) in enumerate(zip(spec.shards_per_stream, spec.choose_per_stream)):
        allocs.append(
            allocate_shards(
                sizes[at : at + n],
                choose=int(choose),
                granularity=spec.sampling_granularity,
                seed=seed,
                stream=s,
            )
        )
        at += n
    alloc = np.concatenate(allocs) if allocs else np.zeros(0, dtype=np.int64)
    return build_units(shard_sizes=sizes, alloc=alloc, seed=seed)


def epoch_order(spec: PlanSpec, epoch: int) -> GlobalOrder:
    """The global order of ``epoch`` (world-independent)."""
    units = epoch_units(spec, epoch)
    algo = spec.shuffle_algo if spec.shuffle else None

    def random_order(sub: Units, block_size: int) -> RandomOrder:
        return RandomOrder(
            units=sub,
            num_canonical_nodes=spec.num_canonical_nodes,
            shuffle_algo=algo,
            seed=spec.shuffle_seed,
            epoch=epoch,
            block_size=block_size,
            window=spec.py1e_window,
            upstream=spec.upstream_order,
        )

    if spec.batching_method == "random":
        return random_order(units, spec.block_size)
    stream_of_shard = np.repeat(np.arange(len(spec.shards_per_stream)), spec.shards_per_stream)
    unit_stream = stream_of_shard[units.shard]
    bounds = np.searchsorted(unit_stream, np.arange(len(spec.shards_per_stream) + 1), side="left")
    choose = np.asarray(spec.choose_per_stream, dtype=np.int64)
    total = max(int(choose.sum()), 1)
    orders: list[GlobalOrder] = []
    kept = []
    for s in range(len(spec.shards_per_stream)):
        if choose[s] == 0:
            continue
        # upstream's block share: stratified / device_per_stream int(bs * proportion), per_stream (ours) bs
        frac = choose[s] / total if spec.batching_method in ("stratified", "device_per_stream") else 1.0
        bs = max(1, int(spec.block_size * frac))
        try:
            orders.append(random_order(units.select(int(bounds[s]), int(bounds[s + 1])), bs))
        except ValueError as err:
            raise ValueError(f"stream {s}: {err}") from None
        kept.append(s)
    g = int(spec.global_batch_size or 0)
    label_seed = (
        spec.shuffle_seed + epoch
        if (spec.shuffle and spec.sampling_method == "balanced")
        else spec.shuffle_seed
    )
    if spec.batching_method == "per_stream":
        return PerStreamOrder(orders=orders, global_batch_size=g, label_seed=label_seed)
    if spec.batching_method == "device_per_stream":
        if len(kept) < len(choose):
            raise ValueError(
                f"batching_method='device_per_stream': stream {int(np.flatnonzero(choose == 0)[0])} has no "
                "samples this epoch (upstream errors too)"
            )
        nodes, ranks = spec.world_shape or (1, 1)
        return DevicePerStreamOrder(
            orders=orders,
            num_canonical_nodes=spec.num_canonical_nodes,
            num_nodes=nodes,
            ranks_per_node=ranks,
            batch_size=g // (nodes * ranks),
            label_seed=label_seed,
        )
    return StratifiedOrder(orders=orders, sizes=choose[kept], global_batch_size=g)


@dataclass
class WorkerPlan:
    """One worker's share of an epoch.

    Attributes:
        order: The epoch's global order.
        drop_first: Entries of the global order already consumed (resumption).
        num_devices: Devices after replication (T).
        device: This device's index (``r * P + p``).
        batch_size: Device batch size.
        num_workers: Workers per rank (1 for ``num_workers=0``).
        worker: This worker.
    """

    order: GlobalOrder
    drop_first: int
    num_devices: int
    device: int
    batch_size: int
    num_workers: int
    worker: int

    @property
    def device_slice(self) -> DeviceSlice:
        total = max(0, len(self.order) - self.drop_first)
        return DeviceSlice(total=total, num_devices=self.num_devices, device=self.device)

    @property
    def device_samples(self) -> int:
        """Samples the whole device (all its workers) yields."""
        return self.device_slice.num_samples

    def batches(self, *, chunk: int = 8192) -> Iterator[np.ndarray]:
        """Yield this worker's batches (arrays of global sample ids), computed ``chunk`` samples at a time."""
        dev = self.device_slice
        b = self.batch_size
        mine = worker_batches(
            num_samples=dev.num_samples, batch_size=b, num_workers=self.num_workers, worker=self.worker
        )
        # start small (fast first batch, e.g. after a resume), then grow to `chunk` samples
        per = 1
        at = 0
        while at < len(mine):
            group = mine[at : at + per]
            at += len(group)
            idx = [np.arange(j * b, min((j + 1) * b, dev.num_samples), dtype=np.int64) for j in group]
            lens = [len(i) for i in idx]
            ids = self.order.sample_ids(self.drop_first + dev.global_index(np.concatenate(idx)))
            yield from np.split(ids, np.cumsum(lens)[:-1])
            per = min(2 * per, max(1, chunk // b))
