"""Mixed precision: an autocast context per precision name, and the GradScaler only fp16 needs.

Design note: we follow Composer's names (`fp32`, `amp_bf16`, `amp_fp16`, `amp_fp8`) but keep the behaviour to
plain `torch.autocast` around forward + loss, so there is nothing to learn beyond PyTorch. `amp_fp8` autocasts
to bf16 like `amp_bf16`; its FP8 matmuls come from the blocks' linear layers, swapped for torchao's
`Float8Linear` before training (`foundry.train.float8`), so it needs FP8 tensor cores (compute capability
>= 8.9: H100/H200, L4/L40S, Blackwell). bf16 autocast
also works on CPU (useful for tests); fp16 needs CUDA because loss scaling exists for its narrow range.
It sits at the top of `foundry`, not in `foundry.train`, because the trainer and the ICL scorer
(`foundry.eval`) both autocast, and eval must not import the trainer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["autocast", "build_grad_scaler", "check_precision", "resolve_precision"]

_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16, "amp_fp8": torch.bfloat16}
FP8_CAPABILITY = (8, 9)


def resolve_precision(precision: str, *, device: torch.device) -> str:
    """`auto` -> `amp_bf16` on CUDA, `fp32` elsewhere; other names unchanged."""
    if precision != "auto":
        return precision
    return "amp_bf16" if device.type == "cuda" else "fp32"


def check_precision(precision: str, *, device: torch.device) -> None:
    """Raises ValueError when `precision` cannot run on `device`, saying what to use instead."""
    if precision == "amp_fp16" and device.type != "cuda":
        raise ValueError(f"trainer.precision=amp_fp16 needs CUDA (device is {device}); use fp32 or amp_bf16")
    if precision == "amp_fp8":
        _check_fp8_hardware(device)
    if precision not in ("fp32", *_DTYPES):
        raise ValueError(f"trainer.precision={precision!r}: use fp32, amp_bf16, amp_fp16 or amp_fp8")


def _check_fp8_hardware(device: torch.device) -> None:
    """Raises ValueError unless `device` is a GPU with FP8 tensor cores."""
    need = f"{FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]}"
    if device.type != "cuda":
        raise ValueError(
            "trainer.precision=amp_fp8 needs an NVIDIA GPU with FP8 tensor cores (compute capability >= "
            f"{need}: H100, H200, L4, L40S, B200); the device is {device.type}: use amp_bf16"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        raise ValueError(
            f"trainer.precision=amp_fp8 needs FP8 tensor cores (compute capability >= {need}); "
            f"{torch.cuda.get_device_name(device)} has {capability[0]}.{capability[1]}: use amp_bf16"
        )


@contextlib.contextmanager
def autocast(precision: str, *, device: torch.device) -> Iterator[None]:
    """Autocast to the precision's dtype on `device` (a no-op for fp32)."""
    if precision == "fp32":
        yield
        return
    with torch.autocast(device_type=device.type, dtype=_DTYPES[precision]):
        yield


def build_grad_scaler(precision: str, *, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for amp_fp16, else None."""
    if precision != "amp_fp16":
        return None
    return torch.amp.GradScaler(device.type)
