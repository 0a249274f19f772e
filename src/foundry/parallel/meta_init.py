"""Materialising a meta-device model after sharding: each rank allocates only its shards, same weights.

Design note: random init of a sharded (DTensor) parameter in place would draw different numbers than the
unsharded model, so results would depend on the world size. Instead, module by module in `model.modules()`
order (the order `foundry.models.materialize_` uses), each rank draws the *full* tensor of a parameter with
the model's own per-module init (transformers' `_init_weights`), keeps its shard and drops the rest. Every
rank consumes the random generator exactly as a single process would, so a sharded meta init equals the
unsharded one for the same seed, while the peak extra memory is one full parameter at a time.

A model marked with pretrained weights (`init_device: meta` with `pretrained: true`) is loaded instead of
initialised: `foundry.parallel.pretrained_load.materialize_or_load_` is the entry for both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["init_sharded_module_", "is_meta", "materialize_local_", "to_empty_keeping_ties_"]


def is_meta(model: nn.Module) -> bool:
    """Whether any parameter or buffer of `model` is still on the meta device."""
    return any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def _init_fn(model: nn.Module) -> Callable[[nn.Module], None]:
    fn = getattr(model, "_init_weights", None)
    if not callable(fn):
        raise ValueError(
            f"{type(model).__name__} has no per-module `_init_weights`, so a meta-device build cannot be "
            "initialised after sharding; set model.init_device=cpu (or cuda)"
        )
    return fn


@torch.no_grad()
def init_sharded_module_(module: nn.Module, init: Callable[[nn.Module], None]) -> None:
    """Runs `init(module)` on `module`'s own tensors; a sharded (DTensor) parameter is drawn full size and
    this rank keeps its shard (same numbers as an unsharded init)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    sharded = {n: p for n, p in module.named_parameters(recurse=False) if isinstance(p, DTensor)}
    # stand-ins: full-size plain tensors
    for name, param in sharded.items():
        full = torch.empty(param.shape, dtype=param.dtype, device=param.to_local().device)
        module._parameters[name] = nn.Parameter(full, requires_grad=param.requires_grad)
    try:
        init(module)
    finally:
        for name, param in sharded.items():
            stand_in = module._parameters[name]
            assert stand_in is not None, f"{type(module).__name__}.{name}: init() removed the parameter"
            local = distribute_tensor(stand_in.data, param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(local.to_local())
            module._parameters[name] = param


def materialize_local_(model: nn.Module, *, device: torch.device | str) -> nn.Module:
    """Allocates `model`'s (possibly sharded) meta tensors on `device` and initialises them.

    Args:
        model: A meta-device transformers model, optionally already `fully_shard`-ed.
        device: Where the local shards go.

    Returns:
        `model`, with weights equal to an unsharded `materialize_` of the same model and seed.
    """
    init = _init_fn(model)
    to_empty_keeping_ties_(model, device=device)
    for module in model.modules():
        init_sharded_module_(module, init)
    return model


def to_empty_keeping_ties_(model: nn.Module, *, device: torch.device | str) -> nn.Module:
    """`model.to_empty(device)`, then the parameters that were one tensor under several names (tied input
    and output embeddings) are one again: `to_empty` allocates each module's parameters separately."""
    groups: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                groups.setdefault(id(param), []).append((module, name))
    model.to_empty(device=device)
    for owners in groups.values():
        first, name = owners[0]
        shared = first._parameters[name]
        for module, other in owners[1:]:
            if module._parameters[other] is not shared:
                module._parameters[other] = shared
    return model
