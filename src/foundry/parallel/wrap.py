"""`wrap_model`: activation checkpointing, then DDP or FSDP2 (`fully_shard` per block, then the root).

Design note: the model knows nothing about parallelism (it never imports `torch.distributed`); everything is
applied from here to a built model, torchtitan-style. The transformer blocks are found structurally (the
children of `nn.ModuleList`s whose class is named in transformers' `_no_split_modules`, e.g. `MPTBlock`), so
any transformers causal LM works. Activation checkpointing uses the composable `checkpoint` API, which adds
hooks but no wrapper module, so parameter names (and checkpoints) stay the same with it on or off.
A model still on the meta device is sharded first and then materialised shard by shard (`meta_init`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from foundry.parallel.config import ParallelismConfig
from foundry.parallel.dist import DistContext

__all__ = ["apply_activation_checkpointing", "build_mesh", "mp_policy", "transformer_blocks", "wrap_model"]

_PRECISION_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16, "amp_fp8": torch.bfloat16}


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of `model` (in order): `_no_split_modules` classes inside `nn.ModuleList`s."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [
        child
        for module in model.modules()
        if isinstance(module, nn.ModuleList)
        for child in module
        # FSDP subclasses too
        if not names or any(c.__name__ in names for c in type(child).__mro__)
    ]
    if not blocks:
        raise ValueError(
            f"found no transformer blocks in {type(model).__name__} (no nn.ModuleList of {sorted(names)}); "
            "FSDP and activation checkpointing wrap per block"
        )
    return blocks


def apply_activation_checkpointing(model: nn.Module) -> None:
    """Recompute every transformer block's activations in backward (non-reentrant, no wrapper module)."""
    from torch.distributed._composable import checkpoint

    for block in transformer_blocks(model):
        checkpoint(block)


def mp_policy(cfg: ParallelismConfig, *, precision: str) -> Any:
    """FSDP2 mixed precision from `cfg.mixed_precision` and the trainer precision's dtype (fp32 -> none)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = _PRECISION_DTYPES.get(precision)
    if dtype is None or cfg.mixed_precision == "FULL":
        return MixedPrecisionPolicy()
    reduce = torch.float32 if cfg.mixed_precision == "DEFAULT" else dtype
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=reduce)


def build_mesh(cfg: ParallelismConfig, *, ctx: DistContext) -> Any:
    """1-D mesh over all ranks, or for HYBRID_SHARD a 2-D
    (replicate, shard) mesh with `shard_size` columns."""
    from torch.distributed.device_mesh import init_device_mesh

    kind = ctx.device.type
    if cfg.sharding_strategy != "HYBRID_SHARD":
        return init_device_mesh(kind, (ctx.world_size,))
    shard = cfg.shard_size or ctx.local_world_size
    if ctx.world_size % shard:
        raise ValueError(
            f"parallelism.shard_size={shard} must divide the world size {ctx.world_size}; "
            "pick a divisor (null means ranks per node)"
        )
    return init_device_mesh(kind, (ctx.world_size // shard, shard), mesh_dim_names=("replicate", "shard"))


def _fsdp(model: nn.Module, *, cfg: ParallelismConfig, ctx: DistContext, precision: str) -> nn.Module:
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    if cfg.cpu_offload and ctx.device.type != "cuda":
        raise ValueError("parallelism.cpu_offload=true only applies to CUDA training; set it false on CPU")
    kwargs: dict[str, Any] = {
        "mesh": build_mesh(cfg, ctx=ctx),
        "mp_policy": mp_policy(cfg, precision=precision),
        "offload_policy": CPUOffloadPolicy() if cfg.cpu_offload else OffloadPolicy(),
    }
    blocks = transformer_blocks(model)
    for i, block in enumerate(blocks):
        # the last block's params are needed again at once by backward: keep them gathered
        reshard = cfg.reshard_after_forward and i < len(blocks) - 1
        fully_shard(block, reshard_after_forward=reshard, **kwargs)
    fully_shard(model, reshard_after_forward=cfg.reshard_after_forward, **kwargs)
    return model


def wrap_model(model: nn.Module, *, cfg: ParallelismConfig, ctx: DistContext, precision: str) -> nn.Module:
    """Applies activation checkpointing and the data-parallel strategy; materialises a meta-device model.

    Args:
        model: The built model (on `ctx.device`, or on meta: then `fsdp` allocates only local shards and
            runs the model's own per-module init, giving the same weights as an unsharded meta init).
        cfg: The parallelism config.
        ctx: The process group context (its device).
        precision: The trainer precision (`fp32`, `amp_bf16`, `amp_fp16`, `amp_fp8`): FSDP's low-precision
            dtype (bf16 for amp_fp8: torchao's Float8Linear casts to FP8 inside its matmuls).

    Returns:
        The model to train: `DistributedDataParallel`, the same module made an `FSDPModule`, or `model`.
    """
    from foundry.parallel.meta_init import is_meta
    from foundry.parallel.pretrained_load import materialize_or_load_

    if cfg.activation_checkpointing:
        apply_activation_checkpointing(model)
    if cfg.strategy == "fsdp":
        meta = is_meta(model)
        model = _fsdp(model, cfg=cfg, ctx=ctx, precision=precision)
        if meta:
            materialize_or_load_(model, device=ctx.device)
        return model
    if is_meta(model):
        materialize_or_load_(model, device=ctx.device)
    if cfg.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DistributedDataParallel(
            model,
            device_ids=ids,
            find_unused_parameters=cfg.find_unused_parameters,
            bucket_cap_mb=cfg.bucket_cap_mb,
        )
    return model
