"""Putting LoRA adapters into a built model, in place: frozen base, adapter-aware init, merge-and-unload.

Design note: adapters are injected with `peft.inject_adapter_in_model`, not wrapped in a `PeftModel`, so the
model keeps its class and everything downstream (the trainer, FSDP2's per-block wrapping, `generate`,
`save_pretrained`) sees the same model with a few more parameters. Parameter names gain `.base_layer.`
(frozen base weights) and `.lora_A.default.` / `.lora_B.default.` (the adapters); `foundry.checkpoint`
maps a plain checkpoint's names onto them. A model built on meta (FSDP's deferred init) is initialised
later module by module through `model._init_weights` (`foundry.parallel.meta_init`, `materialize_`), which
knows nothing of adapters, so the instance's `_init_weights` is wrapped: LoRA A gets peft's kaiming-uniform,
LoRA B zeros (the adapted model starts equal to the base), everything else the model's own init.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.lora import LoraLayer
from torch import nn

from foundry.models.peft.config import MPT_LORA_TARGETS, PeftConfig

__all__ = ["ADAPTER", "apply_peft", "has_adapters", "lora_config", "merge_adapters_"]

ADAPTER = "default"
"""The adapter name inside every LoRA layer (one adapter per model)."""
# marks an adapter's Linear: "A" or "B"
_ROLE = "_foundry_lora"


def lora_config(cfg: PeftConfig, model: nn.Module) -> LoraConfig:
    """The `peft.LoraConfig` for `cfg` on `model` (our MPT's default targets when none are named)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    default = MPT_LORA_TARGETS if model_type == "foundry_mpt" else None
    return LoraConfig(**cfg.to_peft_kwargs(default_targets=default))


def has_adapters(model: nn.Module) -> bool:
    """Whether `model` holds LoRA layers."""
    return any(isinstance(m, LoraLayer) for m in model.modules())


def apply_peft(model: nn.Module, cfg: PeftConfig) -> nn.Module:
    """Injects LoRA adapters into `model` in place; only adapter (and `modules_to_save`/bias) params train.

    Raises:
        ValueError: `target_modules` matched nothing, or matched a layer that is not an `nn.Linear`,
            naming the field and the model's Linear layer names to pick from.
    """
    config = lora_config(cfg, model)
    try:
        inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    except ValueError as err:
        raise ValueError(
            f"model.peft_config.target_modules={cfg.target_modules}: {err}. Linear layers of "
            f"{type(model).__name__}: {_linear_suffixes(model)}"
        ) from err
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    odd = [n for n, m in layers if not isinstance(m, LoraLinear)]
    if odd:
        raise ValueError(
            f"model.peft_config.target_modules matched non-Linear layers {odd[:4]}; only nn.Linear layers "
            f"are supported: pick from {_linear_suffixes(model)}"
        )
    for _, layer in layers:
        setattr(layer.lora_A[ADAPTER], _ROLE, "A")
        setattr(layer.lora_B[ADAPTER], _ROLE, "B")
    base_init = getattr(model, "_init_weights", None)
    # an instance attribute: this model only
    if callable(base_init):
        model.__dict__["_init_weights"] = _adapter_aware_init(base_init)
    return model


def _linear_suffixes(model: nn.Module) -> list[str]:
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})


def _adapter_aware_init(base: Callable[[nn.Module], None]) -> Callable[[nn.Module], None]:
    @torch.no_grad()
    def init(module: nn.Module) -> None:
        role = getattr(module, _ROLE, None)
        weight = getattr(module, "weight", None)
        if role is None or not isinstance(weight, torch.Tensor):
            base(module)
        elif not weight.is_meta:
            if role == "A":
                # peft's default for lora_A
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            else:
                nn.init.zeros_(weight)

    return init


@torch.no_grad()
def merge_adapters_(model: nn.Module) -> nn.Module:
    """Folds every LoRA update into its base weight and puts the plain base layer back (names as before LoRA).

    The result is an ordinary model of the base architecture: `save_pretrained` writes a plain folder.
    """
    for name, module in list(model.named_modules()):
        if not isinstance(module, LoraLayer):
            continue
        module.merge(safe_merge=True)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, module.get_base_layer())
    for attr in ("peft_config", "_init_weights"):
        if attr in model.__dict__:
            del model.__dict__[attr]
    for p in model.parameters():
        p.requires_grad_(True)
    return model
