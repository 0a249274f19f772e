"""Typed schema of the `parallelism` config group: none / DDP / FSDP2, and what each strategy derives.

Design note: llm-foundry's `fsdp_config` has ~30 keys, most of them FSDP1 plumbing (wrap policies, prefetch,
flat params). FSDP2 (`fully_shard`) needs few: the sharding strategy decides the device mesh and
`reshard_after_forward` (derived here, never configured), mixed precision picks the param/reduce dtypes, and
activation checkpointing / CPU offload are switches. Values keep llm-foundry's spelling (`FULL_SHARD`,
`DEFAULT`) so its YAML carries over. Every check runs in `__post_init__`, at compose time.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIXED_PRECISIONS", "ParallelismConfig", "SHARDING_STRATEGIES", "STRATEGIES"]

STRATEGIES = ("none", "ddp", "fsdp")
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD")
MIXED_PRECISIONS = ("FULL", "DEFAULT", "PURE")
BACKENDS = ("auto", "nccl", "gloo")


@dataclass(kw_only=True)
class ParallelismConfig:
    """Data parallelism under `torchrun` (`parallelism` group):
    `none`, `ddp` or `fsdp` (FSDP2 `fully_shard`)."""

    strategy: str = "none"
    """`none` (one process), `ddp` (replicated weights, all-reduced gradients) or `fsdp` (FSDP2 sharding)."""
    backend: str = "auto"
    """Process-group backend: `auto` (nccl on CUDA, gloo on CPU), `nccl` or `gloo`."""
    sharding_strategy: str = "FULL_SHARD"
    """fsdp: `FULL_SHARD` (params, grads, optimizer state sharded; params re-gathered for backward),
    `SHARD_GRAD_OP` (params kept gathered between forward and backward: ZeRO-2-like),
    `HYBRID_SHARD` (shard within groups of `shard_size` ranks, replicate across groups)."""
    shard_size: int | None = None
    """fsdp HYBRID_SHARD: ranks per shard group; null -> ranks per node (`LOCAL_WORLD_SIZE`),
    as llm-foundry."""
    mixed_precision: str = "DEFAULT"
    """fsdp: `FULL` (fp32 params and reduction), `DEFAULT` (params in the trainer precision's dtype, gradients
    reduced in fp32), `PURE` (params and reduction in that dtype).
    With `trainer.precision=fp32` all are fp32."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in backward (less memory, ~1/3 more compute)."""
    cpu_offload: bool = False
    """fsdp on CUDA: keep sharded params, grads and optimizer state in CPU memory (slow; for huge models)."""
    find_unused_parameters: bool = False
    """ddp: tolerate parameters that get no gradient in a step (costs a graph traversal per step)."""
    bucket_cap_mb: float = 25.0
    """ddp: gradient all-reduce bucket size in MiB."""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"parallelism.strategy={self.strategy!r}: choose one of {list(STRATEGIES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"parallelism.backend={self.backend!r}: choose one of {list(BACKENDS)}")
        if self.sharding_strategy not in SHARDING_STRATEGIES:
            raise ValueError(
                f"parallelism.sharding_strategy={self.sharding_strategy!r}: choose one of "
                f"{list(SHARDING_STRATEGIES)} (NO_SHARD is parallelism.strategy=ddp)"
            )
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise ValueError(
                f"parallelism.mixed_precision={self.mixed_precision!r}: "
                f"choose one of {list(MIXED_PRECISIONS)}"
            )
        if self.shard_size is not None:
            if self.shard_size < 1:
                raise ValueError(f"parallelism.shard_size={self.shard_size} must be >= 1 (or null)")
            if self.sharding_strategy != "HYBRID_SHARD":
                raise ValueError(
                    "parallelism.shard_size only applies to sharding_strategy=HYBRID_SHARD; "
                    "set it to null or use HYBRID_SHARD"
                )
        if self.cpu_offload and self.strategy != "fsdp":
            raise ValueError("parallelism.cpu_offload=true needs parallelism.strategy=fsdp (or set it false)")
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"parallelism.bucket_cap_mb={self.bucket_cap_mb} must be > 0")

    @property
    def reshard_after_forward(self) -> bool:
        """Derived from the strategy: free gathered params after forward unless SHARD_GRAD_OP."""
        return self.sharding_strategy != "SHARD_GRAD_OP"

    @property
    def distributed(self) -> bool:
        """Whether the strategy wraps the model for data parallelism."""
        return self.strategy != "none"
