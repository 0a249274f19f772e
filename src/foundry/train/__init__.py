"""The trainer: batching, precision, automatic microbatching, the loop, and `pretrain` (the `pretrain` task)."""

from foundry.train.batching import BatchPlan, plan_batches, split_batch
from foundry.train.config import CheckpointConfig, ParallelismConfig, TrainerConfig
from foundry.train.loop import Trainer
from foundry.train.run import pretrain, resolve_device
from foundry.train.state import TrainState, seed_all

__all__ = [
    "BatchPlan",
    "CheckpointConfig",
    "ParallelismConfig",
    "TrainState",
    "Trainer",
    "TrainerConfig",
    "plan_batches",
    "pretrain",
    "resolve_device",
    "seed_all",
    "split_batch",
]
