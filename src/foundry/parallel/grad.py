"""Gradient plumbing the trainer calls whatever the strategy: accumulation sync, loss weights, clipping.

Design note: DDP and FSDP2 *average* gradients over ranks. For the accumulated gradient to equal the
single-process gradient of the global batch, each microbatch's mean loss is weighted by its share of the
GLOBAL batch's loss tokens (an all-reduced count) times the world size; the world-size factor cancels the
average. Gradient communication is skipped on all but the last microbatch (DDP `no_sync`, FSDP2
`set_requires_gradient_sync(False)`). Clipping sums the squared norms of every rank's shards (DTensor) so the
clip factor is the global one. Each helper is a no-op for an unwrapped model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["clip_grad_norm_", "gradient_sync", "microbatch_weight"]


def microbatch_weight(mb_count: float, *, global_count: float, world_size: int) -> float:
    """Loss weight of a microbatch with `mb_count` loss tokens (or samples) so that the gradient averaged over
    `world_size` ranks equals the gradient of the token mean over the global batch (`global_count` in all)."""
    return mb_count * world_size / max(global_count, 1)


@contextlib.contextmanager
def gradient_sync(model: nn.Module, *, enabled: bool) -> Iterator[None]:
    """Within the block, backward reduces gradients across ranks only when `enabled` (the last microbatch)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel) and not enabled:
        with model.no_sync():
            yield
        return
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
        return
    yield


def clip_grad_norm_(parameters: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clips gradients to a total 2-norm of `max_norm` over every rank's shards; returns the total norm.

    Plain tensors (one process, DDP) give the usual norm; DTensor gradients (FSDP2) are reduced over the
    mesh so every rank scales by the same global factor.
    """
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total, DTensor):
        # Partial(sum of squares) -> the global norm on every rank
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total
