"""The trainer component: batching, automatic microbatching, the loop and its counters.

The `pretrain` task that wires it to data, model, checkpoints and evaluation is `foundry.tasks.pretrain`.
"""

from foundry.train.batching import BatchPlan, plan_batches, split_batch
from foundry.train.config import CheckpointConfig, ParallelismConfig, TrainerConfig
from foundry.train.loop import Trainer
from foundry.train.state import TrainState, seed_all

__all__ = [
    "BatchPlan",
    "CheckpointConfig",
    "ParallelismConfig",
    "TrainState",
    "Trainer",
    "TrainerConfig",
    "plan_batches",
    "seed_all",
    "split_batch",
]
