"""`TrainerConfig`, the typed schema of the `trainer` config group (steps, batch sizes, precision, device).

`SpikeGuardConfig` (`trainer.spike_guard`) is part of this group, so it lives here too (the guard itself is
`foundry.train.spike_guard`). The `parallelism` and `checkpoint` schemas live beside their code
(`foundry.parallel.config`, `foundry.checkpoint.config`) and are re-exported here only for older imports.

Design note: OmegaConf 2.3 has no `Union`/`Literal`, so fields that llm-foundry lets take several types
(`device_train_microbatch_size: 8 | auto`, durations as `4800ba` strings or bare step counts) are declared
`Any`/`str` and validated in `__post_init__`, which `OmegaConf.to_object` runs before anything is built.
Durations stay as strings here; the trainer converts them to steps once, with `foundry.time`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from foundry.checkpoint.config import CheckpointConfig
from foundry.parallel.config import ParallelismConfig
from foundry.time import parse_duration
from foundry.train.compile import normalize_compile
from foundry.train.float8 import FP8_RECIPES
from foundry.train.speed import SPEEDS

__all__ = ["CheckpointConfig", "ParallelismConfig", "SpikeGuardConfig", "TrainerConfig", "PRECISIONS"]

PRECISIONS = ("auto", "fp32", "amp_bf16", "amp_fp16", "amp_fp8")
DEVICES = ("auto", "cpu", "cuda", "mps")
TOKEN_COUNTING = ("padded", "non_pad")


# `value`: str or int from YAML
def _check_duration(name: str, value: Any) -> None:
    try:
        parse_duration(value)
    except ValueError as e:
        raise ValueError(f"trainer.{name}: {e}") from None


@dataclass(kw_only=True)
class SpikeGuardConfig:
    """`trainer.spike_guard`: roll back and skip batches on NaN/Inf or outlier losses (off by default)."""

    enabled: bool = False
    """Turn the guard on."""
    window: int = 100
    """Good steps whose losses form the baseline (median / MAD)."""
    min_history: int = 20
    """Losses needed before the z-score test applies (NaN/Inf are caught from the first step)."""
    z_threshold: float = 6.0
    """A loss this many robust standard deviations above the window's median is a spike."""
    snapshot_interval: int = 10
    """Take the in-memory rollback snapshot every this many good steps (1: skip only the bad batch)."""
    max_rollbacks: int = 5
    """Rollbacks allowed in one run; one more spike stops it."""
    retries_per_step: int = 2
    """Rollbacks allowed for spikes at the same optimizer step; one more spike there stops the run."""

    def __post_init__(self) -> None:
        for name in ("window", "min_history", "snapshot_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.spike_guard.{name}={getattr(self, name)} must be >= 1")
        if self.min_history > self.window:
            raise ValueError(
                f"trainer.spike_guard.min_history={self.min_history} must be <= window={self.window}"
            )
        if not self.z_threshold > 0:
            raise ValueError(f"trainer.spike_guard.z_threshold={self.z_threshold} must be > 0")
        for name in ("max_rollbacks", "retries_per_step"):
            if getattr(self, name) < 0:
                raise ValueError(f"trainer.spike_guard.{name}={getattr(self, name)} must be >= 0")


@dataclass(kw_only=True)
class TrainerConfig:
    """How long and how to step: batch sizes, duration, precision, clipping, eval cadence
    (`trainer` group)."""

    max_duration: str = "100ba"
    """Run length: `4800ba` (optimizer steps), `1ep`, `2.5e9tok`, `1e6sp`; a bare number means steps."""
    global_train_batch_size: int = 8
    """Samples per optimizer step over all ranks (llm-foundry `global_train_batch_size`)."""
    device_train_microbatch_size: Any = "auto"
    """Samples per forward/backward: an int, or `auto` (start at the device batch, halve on CUDA OOM)."""
    device_eval_batch_size: int | None = None
    """Eval batch per rank; null -> the microbatch size (or the device batch when it is `auto`)."""
    eval_interval: str = "500ba"
    """How often to evaluate on the eval split (`0` disables periodic eval; the end of training always
    evals)."""
    eval_first: bool = False
    """Evaluate before the first step."""
    eval_subset_num_batches: int = -1
    """Cap on eval batches per evaluation (-1 = the whole eval split)."""
    precision: str = "auto"
    """`fp32`, `amp_bf16` (autocast bf16, no scaler), `amp_fp16` (autocast fp16 + GradScaler, CUDA only),
    `amp_fp8` (amp_bf16 + FP8 matmuls in the blocks' linear layers through torchao; GPUs with FP8 tensor
    cores, e.g. H100), or `auto` (amp_bf16 on CUDA, fp32 elsewhere). `fp8` is read as `amp_fp8`."""
    grad_clip_norm: float | None = 1.0
    """Clip the global gradient norm to this before each optimizer step (null disables)."""
    accumulate_train_batch_on_tokens: bool = True
    """Weight microbatch losses by loss-generating tokens (exact token mean); false -> by samples."""
    token_counting: str = "padded"
    """What the run's token counter (`tokens` in checkpoints and metrics) counts: `padded` (batch x row
    length) or `non_pad` (tokens where `attention_mask` is 1, all ranks: what Composer/llm-foundry count; the
    llm-foundry translator sets it). A `tok` max_duration needs `padded` (the schedule runs in steps)."""
    device: str = "auto"
    """`auto` (cuda when available, else cpu), `cpu`, `cuda`, `mps`."""
    deterministic: bool = False
    """`torch.use_deterministic_algorithms(True)` (+ CUBLAS workspace config); slower."""
    compile: Any = False
    """`false`; `true` (= `model`: `torch.compile` of the whole model); or `blocks`: each transformer block
    compiled, one graph reused by every layer (`foundry.train.compile`). The first steps are slow while it
    compiles."""
    speed: str = "off"
    """`auto`: on a GPU, the fastest configuration `make gpu-check` measured for the model's size (compiled
    blocks, cuDNN attention, FP8 where it wins; `foundry.train.speed`), filled into the settings left at their
    defaults and named in the run's first lines; `off`: the settings as given. `trainer=gpu` sets `auto`."""
    fp8_recipe: str = "tensorwise"
    """With `amp_fp8`: torchao's `tensorwise` (fastest) or `rowwise` (a scale per row) scaling."""
    fp8_min_dim: int = 16
    """With `amp_fp8`: linear layers with a dimension under this stay bf16
    (small matmuls lose to the casts)."""
    compile_dynamic: bool | None = None
    """null (default): graphs start specialised on the batch shape and a dimension that changes becomes
    dynamic in the one recompilation that follows (PyTorch's automatic dynamic shapes: `auto` micro-batching
    or batches padded to their longest row add one graph, not one per shape); `false`: one static graph per
    shape; `true`: dynamic from the start."""
    memory_check: bool = True
    """Refuse before building anything when the estimated memory (weights, gradients, optimizer state,
    activations) exceeds the device's free memory (`foundry.tasks.memory`); false tries anyway."""
    log_interval: int = 1
    """Log train metrics every this many optimizer steps."""
    progress_bar: bool = True
    """Console progress bar with ETA (otherwise one line per log step)."""
    train_subset_num_batches: int = -1
    """Cap on optimizer steps per epoch (-1 = the whole train split)."""
    preemption_grace: float = 120.0
    """Seconds the scheduler allows between SIGTERM/SIGUSR1 and SIGKILL: on either signal every rank saves a
    checkpoint at the next step boundary and exits with code 75 (requeue; see `foundry.train.preemption`);
    a warning names a stop that took longer. 0 disables the handling (the signals keep their default)."""
    spike_guard: SpikeGuardConfig = field(default_factory=SpikeGuardConfig)
    """Roll back and skip batches on NaN/Inf or outlier losses (`enabled: false` by default)."""

    def __post_init__(self) -> None:
        _check_duration("max_duration", self.max_duration)
        _check_duration("eval_interval", self.eval_interval)
        if self.token_counting not in TOKEN_COUNTING:
            raise ValueError(f"trainer.token_counting={self.token_counting!r}: use padded or non_pad")
        if self.token_counting == "non_pad" and str(self.max_duration).strip().endswith("tok"):
            raise ValueError(
                f"trainer.max_duration={self.max_duration} with trainer.token_counting=non_pad: a token "
                "duration is converted to steps from batch x row length; set trainer.token_counting=padded, "
                "or give the duration in ba/sp/ep"
            )
        self.compile = normalize_compile(self.compile)
        if self.speed not in SPEEDS:
            raise ValueError(f"trainer.speed={self.speed!r}: use auto or off")
        if self.fp8_recipe not in FP8_RECIPES:
            raise ValueError(f"trainer.fp8_recipe={self.fp8_recipe!r}: use tensorwise or rowwise")
        if self.fp8_min_dim < 16:
            raise ValueError(f"trainer.fp8_min_dim={self.fp8_min_dim}: must be >= 16 (FP8 matmul tiles)")
        if self.global_train_batch_size < 1:
            raise ValueError(f"trainer.global_train_batch_size={self.global_train_batch_size} must be >= 1")
        mb = self.device_train_microbatch_size
        if isinstance(mb, str) and mb.isdigit():
            mb = self.device_train_microbatch_size = int(mb)
        if mb != "auto" and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 1):
            raise ValueError(f"trainer.device_train_microbatch_size={mb!r}: use a positive int or 'auto'")
        if self.precision == "fp8":
            self.precision = "amp_fp8"
        if self.precision not in PRECISIONS:
            raise ValueError(f"trainer.precision={self.precision!r}: choose one of {list(PRECISIONS)}")
        if self.device not in DEVICES:
            raise ValueError(f"trainer.device={self.device!r}: choose one of {list(DEVICES)}")
        if self.grad_clip_norm is not None and self.grad_clip_norm <= 0:
            raise ValueError(f"trainer.grad_clip_norm={self.grad_clip_norm} must be > 0 (or null to disable)")
        if self.preemption_grace < 0:
            raise ValueError(f"trainer.preemption_grace={self.preemption_grace} must be >= 0 (0 disables)")
        if self.log_interval < 1:
            raise ValueError(f"trainer.log_interval={self.log_interval} must be >= 1")
        if self.device_eval_batch_size is not None and self.device_eval_batch_size < 1:
            raise ValueError(f"trainer.device_eval_batch_size={self.device_eval_batch_size} must be >= 1")
