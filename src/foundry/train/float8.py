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
matmuls need) is skipped, and so is one smaller than `min_dim` in either dimension (`trainer.fp8_min_dim`):
a small matmul gains less from FP8 than its casts (reading the input, writing the FP8 copy and the scale)
cost, which is why FP8 loses at 125m/350m on an H100 (issue 43). Recipes (`trainer.fp8_recipe`, torchao's
names): `tensorwise` (one dynamic scale per tensor; the fastest) or `rowwise` (a scale per row: more accurate,
its casts cost more; no FP8 all-gather). FSDP2's float8 all-gather (`fsdp_all_gather`, on whenever FSDP shards
over several ranks): the converted weights' shards are cast to FP8 before FSDP all-gathers them (1 byte per
weight instead of bf16's 2); each weight's scale comes from its global amax (one all-reduce per weight, inside
FSDP's pre-all-gather hook). torchao's batched `precompute_float8_dynamic_scale_for_fsdp` is not used: a scale
precomputed after the optimizer step would go stale when the spike guard rolls the weights back or a
checkpoint is loaded, and clip FP8 values silently.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from foundry.precision import check_precision

__all__ = [
    "FP8_RECIPES",
    "TORCHAO_SPEC",
    "check_float8_device",
    "convert_to_float8",
    "float8_linear_names",
]

FP8_RECIPES = ("tensorwise", "rowwise")

TORCHAO_SPEC = "torchao>=0.17"
"""What to install (0.17 and later are ABI-stable against torch >= 2.11)."""


def _torchao_float8() -> Any:
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


def float8_linear_names(model: nn.Module, *, min_dim: int = 16) -> list[str]:
    """Names of the linear layers FP8 applies to: inside transformer blocks, both dimensions multiples of 16
    and at least `min_dim`."""
    from foundry.parallel.wrap import transformer_blocks

    inside = {id(m) for block in transformer_blocks(model) for m in block.modules()}
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
        and id(m) in inside
        and m.in_features % 16 == 0
        and m.out_features % 16 == 0
        and min(m.in_features, m.out_features) >= min_dim
    ]


def convert_to_float8(
    model: nn.Module,
    *,
    emulate: bool = False,
    fsdp_all_gather: bool = False,
    recipe: str = "tensorwise",
    min_dim: int = 16,
) -> list[str]:
    """Swaps the blocks' linear layers for torchao's `Float8Linear` in place; returns their names.

    Args:
        model: The built model, before `wrap_model` and compilation.
        emulate: torchao's emulation (FP8 casts, matmul in high precision): for tests on any device.
        fsdp_all_gather: FSDP2 all-gathers the converted weights in FP8 (for FSDP over several ranks;
            tensorwise only: rowwise all-gathers bf16).
        recipe: `tensorwise` or `rowwise` (torchao's recipe names).
        min_dim: Layers with a dimension under this stay bf16.

    Raises:
        ValueError: torchao is missing, the recipe is unknown, or no layer qualifies.
    """
    float8 = _torchao_float8()
    if recipe not in FP8_RECIPES:
        raise ValueError(f"trainer.fp8_recipe={recipe!r}: choose one of {list(FP8_RECIPES)}")
    names = set(float8_linear_names(model, min_dim=min_dim))
    if not names:
        raise ValueError(
            "trainer.precision=amp_fp8 found no linear layer to run in FP8 (transformer blocks with "
            f"dimensions that are multiples of 16 and at least trainer.fp8_min_dim={min_dim}); lower "
            "trainer.fp8_min_dim or use amp_bf16"
        )
    # the model's own attributes on its layers (e.g. MPT's `_is_residual` init markers) survive the swap
    marks = {n: dict(vars(m)) for n, m in model.named_modules() if n in names}
    if recipe == "tensorwise":
        config = float8.Float8LinearConfig(emulate=emulate, enable_fsdp_float8_all_gather=fsdp_all_gather)
    else:
        config = replace(float8.Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
    float8.convert_to_float8_training(model, config=config, module_filter_fn=lambda _m, fqn: fqn in names)
    for name, module in model.named_modules():
        for key, value in marks.get(name, {}).items():
            if not hasattr(module, key):
                setattr(module, key, value)
    return sorted(names)
