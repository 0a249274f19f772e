"""Data parallelism under `torchrun`: process group, DDP / FSDP2 wrapping, meta init, gradient plumbing.

The model code never imports `torch.distributed`; everything parallel is applied from here. Only the config
schema is imported eagerly (the root config needs it); the rest loads `torch.distributed` on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from foundry.parallel.config import ParallelismConfig

_LAZY = {
    "DistContext": "dist",
    "all_reduce_sum": "dist",
    "barrier": "dist",
    "broadcast_object": "dist",
    "init_distributed": "dist",
    "resolve_backend": "dist",
    "teardown": "dist",
    "world_size": "dist",
    "clip_grad_norm_": "grad",
    "gradient_sync": "grad",
    "microbatch_weight": "grad",
    "is_meta": "meta_init",
    "materialize_local_": "meta_init",
    "apply_activation_checkpointing": "wrap",
    "build_mesh": "wrap",
    "mp_policy": "wrap",
    "transformer_blocks": "wrap",
    "wrap_model": "wrap",
}

__all__ = ["ParallelismConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"foundry.parallel.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'foundry.parallel' has no attribute {name!r}")
