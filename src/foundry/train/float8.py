"""FP8 training (`trainer.precision=amp_fp8`): the blocks' linear layers through torchao's float8 training.

Design note: the model knows nothing about FP8. Before the model is wrapped (and compiled), every
`nn.Linear` inside a transformer block (attention's Wqkv/out_proj, the FFN's up/down/gate projections) is
swapped for torchao's `Float8Linear`, which casts its input, weight and output gradient to FP8 with dynamic
per-tensor scales (e4m3 forward, e5m2 gradients) and multiplies with `torch._scaled_mm`; weights, optimizer
state and everything else stay as they were (fp32 masters, bf16 autocast), and since `Float8Linear` is an
`nn.Linear` subclass with the same parameters, checkpoint keys are unchanged; attributes the model set on its
layers (MPT's init markers, which a meta-device build reads when it materialises) are copied to the new ones.
The embedding and the output head are left alone (torchtitan's default too: the head's large vocabulary
dimension is where FP8 costs the most accuracy). A layer whose dimensions are not multiples of 16 (what FP8
matmuls need) is skipped.
FSDP2's float8 all-gather (`fsdp_all_gather`, on whenever FSDP shards over several ranks): the converted weights'
shards are cast to FP8 before FSDP all-gathers them (1 byte per weight instead of bf16's 2); each weight's scale
comes from its global amax (one all-reduce per weight, inside FSDP's pre-all-gather hook). torchao's batched
`precompute_float8_dynamic_scale_for_fsdp` is not used: a scale precomputed after the optimizer step would go
stale when the spike guard rolls the weights back or a checkpoint is loaded, and clip FP8 values silently.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from foundry.precision import check_precision

__all__ = ["TORCHAO_SPEC", "check_float8_device", "convert_to_float8", "float8_linear_names"]

TORCHAO_SPEC = "torchao>=0.17"
"""What to install (0.17 and later are ABI-stable against torch >= 2.11)."""


def _torchao_float8() -> Any:  # noqa: ANN401 - the torchao.float8 module
    try:
        import torchao.float8 as float8
    except ImportError:
        raise ValueError(
            f"trainer.precision=amp_fp8 needs torchao: pip install '{TORCHAO_SPEC}' "
            "(or `pip install foundry-stack[fp8]`); or use amp_bf16"
        ) from None
    return float8


def check_float8_device(device: torch.device) -> None:
    """Raises ValueError (one line, naming what to use instead) unless FP8 training can run on `device`:
    a GPU with FP8 tensor cores (compute capability >= 8.9) and torchao installed."""
    check_precision("amp_fp8", device=device)
    _torchao_float8()


def float8_linear_names(model: nn.Module) -> list[str]:
    """Names of the linear layers FP8 applies to: inside transformer blocks, both dimensions multiples of 16."""
    from foundry.parallel.wrap import transformer_blocks

    inside = {id(m) for block in transformer_blocks(model) for m in block.modules()}
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
        and id(m) in inside
        and m.in_features % 16 == 0
        and m.out_features % 16 == 0
    ]


def convert_to_float8(model: nn.Module, *, emulate: bool = False, fsdp_all_gather: bool = False) -> list[str]:
    """Swaps the blocks' linear layers for torchao's `Float8Linear` in place; returns their names.

    Args:
        model: The built model, before `wrap_model` and compilation.
        emulate: torchao's emulation (FP8 casts, matmul in high precision): for tests on any device.
        fsdp_all_gather: FSDP2 all-gathers the converted weights in FP8 (for FSDP over several ranks).

    Raises:
        ValueError: torchao is missing, or no layer qualifies.
    """
    float8 = _torchao_float8()
    names = set(float8_linear_names(model))
    if not names:
        raise ValueError(
            "trainer.precision=amp_fp8 found no linear layer to run in FP8 (transformer blocks with "
            "dimensions that are multiples of 16); use amp_bf16"
        )
    # the model's own attributes on its layers (e.g. MPT's `_is_residual` init markers) survive the swap
    marks = {n: dict(vars(m)) for n, m in model.named_modules() if n in names}
    config = float8.Float8LinearConfig(emulate=emulate, enable_fsdp_float8_all_gather=fsdp_all_gather)
    float8.convert_to_float8_training(model, config=config, module_filter_fn=lambda _m, fqn: fqn in names)
    for name, module in model.named_modules():
        for key, value in marks.get(name, {}).items():
            if not hasattr(module, key):
                setattr(module, key, value)
    return sorted(names)
