"""`trainer.speed=auto`: the fastest configuration `make gpu-check` measured for the model's size on this GPU.

Design note: the choice is a pure function (`pick_speed`) of the model's size (non-embedding parameters, the
bucket a row of `SPEED_TABLE` covers), the GPU's name and compute capability and whether torchao imports; the
table holds what the speed matrix (`scripts/bench/gpu_matrix.py`, one H100) measured fastest at each size,
with that figure, so a run says in its first lines what it picked and why. `apply_speed` fills only the
settings a user left at their defaults (`trainer.compile: false`, `model.loss_fn: torch_crossentropy`,
`trainer.precision: auto`): anything set explicitly wins. The attention kernel is the one exception:
`attn_impl: flash` (every llm-foundry GPU recipe, and ours) asks for a fused kernel rather than a particular
one, so `auto` replaces `torch` and `flash` with the fastest fused kernel measured (cuDNN on Hopper: 1.4-1.7x
flash's forward + backward, the same outputs within bf16 rounding); `cudnn` set explicitly stays, and
`trainer.speed=off` keeps `flash`. Off a GPU, for models
that are not MPT (a transformers model keeps its own attention and loss), and with `trainer.speed=off`,
nothing changes. The micro-batch is not part of the choice: `device_train_microbatch_size: auto` already
starts at the device batch and halves on out-of-memory, so the largest one that fits is what runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from foundry.models.config import MPTModelConfig

if TYPE_CHECKING:
    from foundry.config import TrainConfig

__all__ = ["SPEEDS", "SPEED_TABLE", "SpeedChoice", "apply_speed", "pick_speed", "speed_line"]

SPEEDS = ("off", "auto")


@dataclass(frozen=True)
class SpeedChoice:
    """One row of the table: what to run for models up to `max_params` non-embedding parameters."""

    max_params: float
    size: str
    """The matrix size the row was measured at."""
    compile: str
    loss_fn: str
    attn_impl: str
    fp8: bool
    measured: str
    """The matrix's figure behind the choice (tokens/s, MFU, vs the eager bf16 default)."""


SPEED_TABLE: tuple[SpeedChoice, ...] = (
    SpeedChoice(0.25e9, "mpt-125m", "blocks", "torch_crossentropy", "cudnn", False,
                "452k tokens/s, 44.7% MFU, 1.41x eager bf16 at micro-batch 32; FP8 0.90x"),
    SpeedChoice(0.6e9, "mpt-350m", "blocks", "torch_crossentropy", "cudnn", False,
                "172k tokens/s, 47.6% MFU, 1.22x eager bf16 at micro-batch 16; FP8 0.91x"),
    SpeedChoice(2.0e9, "mpt-1b", "blocks", "torch_crossentropy", "cudnn", True,
                "67.0k tokens/s, 61.7% of the bf16 peak at micro-batch 16 with FP8; FP8 1.08x bf16"),
    SpeedChoice(float("inf"), "mpt-3b", "blocks", "torch_crossentropy", "cudnn", True,
                "30.6k tokens/s, 55.4% of the bf16 peak at micro-batch 4 with FP8; FP8 1.13x bf16"),
)  # fmt: skip
"""Measured on one H100 80GB (Hopper, torch 2.11, seq 2048; `make gpu-check`, 2026-11-27); other GPUs get the
same rows with SDPA's flash kernel first, and FP8 only with FP8 tensor cores."""

HOPPER = (9, 0)


def pick_speed(
    non_embedding_params: float, *, capability: tuple[int, int], fp8_available: bool
) -> SpeedChoice:
    """The table's row for a model of this size on this GPU: FP8 only with FP8 tensor cores (>= 8.9) and
    torchao; cuDNN attention on Hopper (elsewhere SDPA's flash kernel first)."""
    row = next(r for r in SPEED_TABLE if non_embedding_params <= r.max_params)
    fp8 = row.fp8 and fp8_available and capability >= (8, 9)
    attn = row.attn_impl if capability >= HOPPER else "flash"
    return replace(row, fp8=fp8, attn_impl=attn)


def speed_line(choice: SpeedChoice, *, gpu: str, changed: dict[str, Any]) -> str:
    """The run's line saying what `auto` picked and why."""
    picked = " ".join(f"{k}={v}" for k, v in changed.items()) or "nothing to change (all set explicitly)"
    return (
        f"speed=auto on {gpu}: {picked} (fastest measured at {choice.size}: {choice.measured}; "
        "trainer.speed=off or explicit settings to override)"
    )


def _fp8_available() -> bool:
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        return False
    return True


def apply_speed(
    cfg: TrainConfig,
    *,
    device: torch.device,
    gpu: tuple[str, tuple[int, int]] | None = None,
    fp8_available: bool | None = None,
) -> tuple[TrainConfig, str | None]:
    """`cfg` with `auto`'s choice filled into the settings left at their defaults, and the line to print;
    (`cfg`, None) when `trainer.speed` is off, the device is not a GPU or the model is not MPT. `gpu` (name,
    compute capability) and `fp8_available` default to what this machine has (tests pass their own)."""
    tc = cfg.trainer
    model = cfg.model
    if tc.speed != "auto" or device.type != "cuda" or not isinstance(model, MPTModelConfig):
        return cfg, None
    name, capability = gpu or (torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))
    d, layers = model.d_model, model.n_layers
    choice = pick_speed(
        12.0 * layers * d * d,
        capability=capability,
        fp8_available=_fp8_available() if fp8_available is None else fp8_available,
    )
    changed: dict[str, Any] = {}
    if tc.compile == "none":
        tc = replace(tc, compile=choice.compile)
        changed["trainer.compile"] = choice.compile
    if tc.precision == "auto":
        tc = replace(tc, precision="amp_fp8" if choice.fp8 else "amp_bf16")
        changed["trainer.precision"] = tc.precision
    if model.loss_fn == "torch_crossentropy" and choice.loss_fn != model.loss_fn:
        model = replace(model, loss_fn=choice.loss_fn)
        changed["model.loss_fn"] = choice.loss_fn
    if model.attn_config.attn_impl in ("torch", "flash") and model.attn_config.attn_impl != choice.attn_impl:
        model = replace(model, attn_config=replace(model.attn_config, attn_impl=choice.attn_impl))
        changed["model.attn_config.attn_impl"] = choice.attn_impl
    return replace(cfg, trainer=tc, model=model), speed_line(choice, gpu=name, changed=changed)
