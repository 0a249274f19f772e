"""Batch arithmetic (pure): global batch -> device batch -> microbatches, and splitting a batch dict.

Design note: everything derived from `global_train_batch_size` is computed here, once, from three
numbers (global batch, world size, microbatch) and logged in the run directory, so no derived quantity
is ever configured. As in Composer, the last microbatch may be smaller (48 = 11+11+11+11+4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["BatchPlan", "plan_batches", "split_batch", "loss_tokens"]


@dataclass(frozen=True)
class BatchPlan:
    """Derived batch sizes of a run."""

    global_batch_size: int
    """Samples per optimizer step over all ranks."""
    device_batch_size: int
    """Samples per optimizer step on one rank."""
    microbatch_size: int
    """Samples per forward/backward (the current value; `auto` may lower it)."""
    auto_microbatch: bool
    """Whether the microbatch size adapts to out-of-memory errors."""

    @property
    def grad_accum(self) -> int:
        """Microbatches per optimizer step."""
        return math.ceil(self.device_batch_size / self.microbatch_size)


def plan_batches(*, global_batch_size: int, world_size: int, microbatch: int | str) -> BatchPlan:
    """Split the global batch over ranks and microbatches.

    Args:
        global_batch_size: Samples per optimizer step over all ranks.
        world_size: Number of ranks.
        microbatch: An int (clamped to the device batch) or `auto` (start at the device batch).

    Returns:
        The plan.

    Raises:
        ValueError: The global batch does not divide evenly over the ranks.
    """
    if global_batch_size % world_size:
        raise ValueError(
            f"trainer.global_train_batch_size={global_batch_size} is not divisible by the world size "
            f"{world_size}; use a multiple of {world_size}"
        )
    device = global_batch_size // world_size
    auto = microbatch == "auto"
    mb = device if auto else min(int(microbatch), device)
    return BatchPlan(global_batch_size, device, mb, auto)


def split_batch(batch: dict[str, torch.Tensor], microbatch_size: int) -> list[dict[str, torch.Tensor]]:
    """Slice every (B, ...) tensor of `batch` along dim 0 into chunks of `microbatch_size`
    (last may be smaller)."""
    n = next(iter(batch.values())).shape[0]
    return [{k: v[i : i + microbatch_size] for k, v in batch.items()} for i in range(0, n, microbatch_size)]


def loss_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Tokens that produce a loss: labels are shifted inside the model,
    so targets are `labels[:, 1:] != -100`."""
    return int((batch["labels"][:, 1:] != -100).sum())
