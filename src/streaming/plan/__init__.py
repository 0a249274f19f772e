"""Pure epoch-plan algorithms: stream mixing, partitioning, shuffles, batching, the lazy per-worker plan.

No I/O, no torch, no environment: ints and numpy arrays in, arrays out, so every rule that decides which
sample goes where is a pure function with property tests.
"""

from __future__ import annotations

# numpy imports these on first use (np.random.default_rng; np.unique consults np.ma), which put ~20 ms of
# imports inside a dataset's first iteration (its first sample); importing them with the plan moves that to
# import time, where the reference library pays it too.
import numpy.ma
import numpy.random  # noqa: F401

from streaming.plan.batching import BATCHING_METHODS, GlobalOrder
from streaming.plan.epoch import PlanSpec, WorkerPlan, default_block_size, epoch_order, epoch_units
from streaming.plan.partition import CanonicalOrder, DeviceSlice, check_partition, worker_batches
from streaming.plan.sampling import Units, allocate_shards, build_units, stream_choose
from streaming.plan.shuffle import PLAN_VERSIONS, SHUFFLE_ALGOS, make_shuffle, plan_version

__all__ = [
    "BATCHING_METHODS",
    "PLAN_VERSIONS",
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
    "plan_version",
    "stream_choose",
    "worker_batches",
]
