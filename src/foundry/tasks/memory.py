"""Will the run fit? `check_memory` estimates a training run's memory before anything is allocated or built.

Design note: a model too big for its device used to fail deep in the allocator (a 28-frame traceback, after
the shared data was built); a run now compares a rough estimate with the device's free memory first and
refuses with one message naming each part, the memory available and what to change. Parameters are counted
exactly by creating the model on the meta device (no memory, ~1 s even for 70B; LoRA's trainable share
included); the rest is arithmetic (`estimate_memory`, pure): fp32 weights (AMP keeps fp32 masters, so
`amp_bf16` does not shrink them), a gradient per trainable weight, the optimizer's states per trainable weight
(AdamW 2, Lion 1, fp32), FSDP dividing those over its shard group, and activations per microbatch per layer
after Korthikanti et al. (~17 values of `d_model` per token per layer, 2 bytes each under AMP and 4 in fp32;
only each layer's input with activation checkpointing) plus the fp32 logits. It aims at the runs that cannot
possibly fit (an estimate below the truth lets them fail later, as before); `trainer.memory_check=false` skips
it for a run the estimate wrongly refuses. With `device_train_microbatch_size=auto` the trainer halves the
microbatch on OOM, so activations are counted for a microbatch of 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from foundry.config import TrainConfig
from foundry.errors import ConfigError
from foundry.models import ModelConfig
from foundry.models.build import build_model
from foundry.models.config import HFCausalLMConfig
from foundry.optim.config import DecoupledLionWConfig, OptimizerConfig
from foundry.tasks.plan import batch_plan, resolve_max_seq_len
from streaming.reader.world import World

__all__ = [
    "MemoryEstimate",
    "ModelSize",
    "available_memory",
    "check_memory",
    "estimate_memory",
    "model_size",
    "optimizer_states",
]

GB = 1e9
ACTIVATION_VALUES_PER_LAYER = 17
"""Values of width `d_model` a transformer layer keeps per token for backward (Korthikanti et al. 2022: 34
bytes in 16-bit, without the attention-score term that flash/SDPA kernels do not store)."""
LOGIT_COPIES = 3
"""fp32 (B, S, vocab) tensors alive at the loss: logits, log-softmax, their gradient."""


@dataclass(frozen=True)
class ModelSize:
    """What the estimate needs to know of a model: exact parameter counts and its shape."""

    total: int
    """Parameters (LoRA adapters included)."""
    trainable: int
    """Parameters with `requires_grad` (LoRA: the adapters only)."""
    param_bytes: int
    """Bytes per parameter (4: fp32)."""
    d_model: int
    n_layers: int
    vocab_size: int


@dataclass(frozen=True)
class MemoryEstimate:
    """A run's estimated memory per rank, in bytes, by part."""

    params: int
    grads: int
    optimizer: int
    activations: int
    size: ModelSize
    optimizer_states: int
    microbatch: int
    seq_len: int
    shards: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations

    @property
    def model_state(self) -> int:
        """Weights, gradients and optimizer state (what FSDP shards)."""
        return self.params + self.grads + self.optimizer

    def describe(self) -> str:
        """`parameters 52.0 GB (13.0B fp32), gradients ..., optimizer state ..., activations ...`."""
        s = self.size
        dtype = {4: "fp32", 2: "16-bit"}.get(s.param_bytes, f"{s.param_bytes}-byte")
        lora = f", {_count(s.trainable)} trainable" if s.trainable != s.total else ""
        sharded = f", sharded over {self.shards} ranks" if self.shards > 1 else ""
        return (
            f"parameters {_gb(self.params)} ({_count(s.total)} {dtype}{lora}{sharded}), gradients "
            f"{_gb(self.grads)}, optimizer state {_gb(self.optimizer)} ({self.optimizer_states} fp32 "
            f"state(s) per trainable parameter), activations {_gb(self.activations)} (microbatch "
            f"{self.microbatch} x {self.seq_len} tokens, {s.n_layers} layers of d_model {s.d_model})"
        )


def _count(n: int) -> str:
    """`12.9B`, `125.1M`, `141.1K` parameters."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= 0.05 * GB else f"{n / 1e6:.1f} MB"


def estimate_memory(
    size: ModelSize,
    *,
    seq_len: int,
    microbatch: int,
    activation_bytes: int,
    optimizer_states: int,
    activation_checkpointing: bool,
    shards: int = 1,
    fused_loss: bool = False,
) -> MemoryEstimate:
    """The memory one rank needs to train a model of `size` (pure arithmetic; see the module note).

    Args:
        size: The model's parameter counts and shape.
        seq_len: Tokens per row. microbatch: Rows per forward/backward.
        activation_bytes: Bytes per stored activation value (2 under AMP, 4 in fp32).
        optimizer_states: fp32 states per trainable parameter (AdamW 2, Lion 1).
        activation_checkpointing: Only each layer's input is kept (plus one layer being recomputed).
        shards: Ranks sharing the weights, gradients and optimizer state (FSDP), 1 otherwise.
        fused_loss: `model.loss_fn` chunked or liger: no full logits, only a chunk of them (about the hidden
            states' size, `foundry.models.mpt.loss`) and the loss's fp32 weight gradient.

    Returns:
        The estimate, by part.
    """
    tokens = seq_len * microbatch
    layer = ACTIVATION_VALUES_PER_LAYER * tokens * size.d_model * activation_bytes
    if activation_checkpointing:
        layers = size.n_layers * tokens * size.d_model * activation_bytes + layer
    else:
        layers = size.n_layers * layer
    logits = LOGIT_COPIES * tokens * size.vocab_size * 4
    if fused_loss:
        logits = LOGIT_COPIES * tokens * size.d_model * 4 + size.vocab_size * size.d_model * 4
    return MemoryEstimate(
        params=size.total * size.param_bytes // shards,
        grads=size.trainable * size.param_bytes // shards,
        optimizer=size.trainable * optimizer_states * 4 // shards,
        activations=layers + logits,
        size=size,
        optimizer_states=optimizer_states,
        microbatch=microbatch,
        seq_len=seq_len,
        shards=shards,
    )


def optimizer_states(cfg: OptimizerConfig) -> int:
    """fp32 states the optimizer keeps per trainable parameter: Lion 1, AdamW 2 (3 with amsgrad)."""
    if isinstance(cfg, DecoupledLionWConfig):
        return 1
    return 3 if getattr(cfg, "amsgrad", False) else 2


def model_size(cfg: ModelConfig) -> ModelSize:
    """Exact parameter counts and the shape of the model `cfg` describes, from a meta-device copy (no memory).

    Raises:
        ValueError: The model cannot be created (a transformers config that is not found, ...).
    """
    if isinstance(cfg, HFCausalLMConfig):
        cfg = replace(cfg, pretrained=False, init_device="meta")
        model = build_model(cfg)
    else:
        model = build_model(cfg, device="meta")
    params = list(model.parameters())
    config = model.config
    return ModelSize(
        total=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
        param_bytes=max((p.element_size() for p in params), default=4),
        d_model=_first(config, "d_model", "hidden_size", "n_embd"),
        n_layers=_first(config, "n_layers", "num_hidden_layers", "n_layer"),
        vocab_size=_first(config, "vocab_size"),
    )


def _first(config: object, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return 0


def available_memory(device: torch.device) -> tuple[int, str] | None:
    """Free memory on `device` in bytes and where the number comes from; None when it cannot be told.

    CUDA: `torch.cuda.mem_get_info` (free). CPU: psutil's `available` if installed, else `MemAvailable` of
    `/proc/meminfo`.
    """
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free), f"free on {device} (torch.cuda.mem_get_info)"
    if device.type != "cpu":
        return None
    try:
        import psutil

        return int(psutil.virtual_memory().available), "available RAM (psutil)"
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available RAM (MemAvailable in /proc/meminfo)"
    except OSError:
        return None
    return None


def _shards(cfg: TrainConfig, world: World) -> int:
    pc = cfg.parallelism
    if pc.strategy != "fsdp":
        return 1
    if pc.sharding_strategy == "HYBRID_SHARD":
        return pc.shard_size or world.ranks_per_node
    return world.num_ranks


def run_estimate(cfg: TrainConfig, *, world: World, precision: str) -> MemoryEstimate:
    """`estimate_memory` for the run `cfg` describes on `world` (precision resolved for the device)."""
    batches = batch_plan(cfg, world)
    return estimate_memory(
        model_size(cfg.model),
        seq_len=resolve_max_seq_len(cfg),
        microbatch=1 if batches.auto_microbatch else batches.microbatch_size,
        activation_bytes=4 if precision == "fp32" else 2,
        optimizer_states=optimizer_states(cfg.optimizer),
        activation_checkpointing=cfg.parallelism.activation_checkpointing,
        shards=_shards(cfg, world),
        fused_loss=getattr(cfg.model, "loss_fn", "torch_crossentropy") != "torch_crossentropy",
    )


def check_memory(
    cfg: TrainConfig,
    *,
    device: torch.device,
    world: World,
    precision: str,
    available: tuple[int, str] | None = None,
) -> MemoryEstimate | None:
    """Refuses a run whose estimated memory exceeds what `device` has free, before anything is built.

    Args:
        cfg: The run's config. device: Its training device. world: Its ranks. precision: Resolved precision.
        available: Free bytes and their source (default: `available_memory(device)`; tests inject a size).

    Returns:
        The estimate (None when the check is off or the device's free memory cannot be told).

    Raises:
        ConfigError: The estimate exceeds the free memory; names each part and the options.
    """
    if not cfg.trainer.memory_check:
        return None
    free = available if available is not None else available_memory(device)
    if free is None:
        return None
    est = run_estimate(cfg, world=world, precision=precision)
    # CPU ranks of a node share its RAM
    per_host = world.ranks_per_node if device.type == "cpu" else 1
    # model state lives in CPU memory
    offloaded = cfg.parallelism.cpu_offload and device.type == "cuda"
    need = (est.activations if offloaded else est.total) * per_host
    if need <= free[0]:
        return est
    raise ConfigError(_refusal(cfg, est, need=need, free=free, device=device, per_host=per_host))


def _refusal(
    cfg: TrainConfig,
    est: MemoryEstimate,
    *,
    need: int,
    free: tuple[int, str],
    device: torch.device,
    per_host: int,
) -> str:
    ranks = f" for {per_host} ranks" if per_host > 1 else ""
    micro = cfg.trainer.device_train_microbatch_size
    options = [
        "a smaller model (model=mpt-125m, mpt-350m, ...)",
        "model.init_device=meta with parallelism=fsdp under torchrun over N ranks (or GPUs), which divides "
        f"the {_gb(est.model_state * est.shards)} of weights, gradients and optimizer state by N",
        "trainer.precision=amp_bf16 (activations in 16-bit; weights stay fp32) or "
        "parallelism.activation_checkpointing=true",
    ]
    if micro != "auto" and est.microbatch > 1:
        options.append(f"a smaller trainer.device_train_microbatch_size (now {micro}) or auto")
    return (
        f"the model does not fit in memory on {device}: training it needs about {_gb(need)}{ranks} "
        f"({est.describe()}) but {_gb(free[0])} is {free[1]}. Options: {'; '.join(options)}; or "
        "trainer.memory_check=false to try anyway"
    )
