"""Pure epoch-plan algorithms: stream mixing, partitioning, shuffles, batching, the lazy per-worker plan.

No I/O, no torch, no environment: ints and numpy arrays in, arrays out, so every rule that decides which
sample goes where is a pure function with property tests.
"""

from __future__ import annotations

from streaming.plan.batching import BATCHING_METHODS, GlobalOrder
from streaming.plan.epoch import PlanSpec, WorkerPlan, default_block_size, epoch_order, epoch_units
from streaming.plan.partition import CanonicalOrder, DeviceSlice, check_partition, worker_batches
from streaming.plan.sampling import Units, allocate_shards, build_units, stream_choose
from streaming.plan.shuffle import SHUFFLE_ALGOS, make_shuffle

__all__ = [
    "BATCHING_METHODS",
    "SHUFFLE_ALGOS",
    "CanonicalOrder",
    "DeviceSlice",
    "GlobalOrder",
    "PlanSpec",
    "Units",
    "WorkerPlan",
    "allocate_shards",
    "build_units",
    "check_partition",
    "default_block_size",
    "epoch_order",
    "epoch_units",
    "make_shuffle",
    "stream_choose",
    "worker_batches",
]
