"""PEFT adapter folders: `adapter_config.json` + `adapter_model.safetensors`, written and read.

Design note: the folder is exactly what `peft.PeftModel.save_pretrained` writes (tensor names prefixed with
`base_model.model.`, no adapter name), so `PeftModel.from_pretrained(base, folder)` and the rest of the
ecosystem load it; we read it back with `load_adapter`, which injects the folder's LoRA config into a built
base model (`foundry.models.peft.inject`) and assigns the tensors, strictly: an adapter tensor the model
lacks, or an adapter layer the folder has no tensors for, names the first few offenders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model, set_peft_model_state_dict
from safetensors.torch import load_file, save_file
from torch import nn

from foundry.models.peft.config import PeftConfig
from foundry.models.peft.inject import ADAPTER, has_adapters, lora_config

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "adapter_state_dict",
    "load_adapter",
    "save_adapter",
]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors of a LoRA-injected model, named as PEFT saves them (CPU, contiguous)."""
    # save_embedding_layers=False: "auto" looks the base model up on the hub (offline runs must not)
    sd = get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    return {_PREFIX + k: v.detach().to("cpu").contiguous() for k, v in sd.items()}


def save_adapter(
    model: nn.Module, cfg: PeftConfig, out_dir: str | Path, *, base_model: str | None = None
) -> Path:
    """Writes `model`'s adapters and their LoRA config as a PEFT folder; returns the folder.

    Args:
        model: A model after `apply_peft` (unwrapped: not DDP/FSDP). cfg: its `model.peft_config`.
        out_dir: The folder. base_model: recorded as `base_model_name_or_path` (where the base lives).
    """
    if not has_adapters(model):
        raise ValueError(f"{type(model).__name__} has no LoRA adapters to save (model.peft_config is null?)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = lora_config(cfg, model)
    config.base_model_name_or_path = base_model
    config.save_pretrained(str(out))
    save_file(adapter_state_dict(model), str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return out


def read_adapter_config(folder: str | Path) -> dict[str, Any]:
    """The folder's `adapter_config.json` as a mapping (names the file when it is missing)."""
    path = Path(folder) / ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a PEFT adapter folder (no {ADAPTER_CONFIG})")
    return json.loads(path.read_text())


def load_adapter(model: nn.Module, folder: str | Path) -> nn.Module:
    """Injects the adapters of PEFT folder `folder` into base `model` (in place) and loads their weights.

    Raises:
        ValueError: The folder is not LoRA, or its tensors and the injected layers do not match.
    """
    body = read_adapter_config(folder)
    if str(body.get("peft_type", "")).upper() != "LORA":
        raise ValueError(f"{folder}/{ADAPTER_CONFIG}: peft_type={body.get('peft_type')!r}; only LORA loads")
    inject_adapter_in_model(LoraConfig.from_pretrained(str(folder)), model, adapter_name=ADAPTER)
    stored = load_file(str(Path(folder) / ADAPTER_WEIGHTS))
    sd = {k.removeprefix(_PREFIX): v for k, v in stored.items()}
    expected = set(get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False))
    missing, unexpected = sorted(expected - set(sd)), sorted(set(sd) - expected)
    if missing or unexpected:
        raise ValueError(
            f"{folder}/{ADAPTER_WEIGHTS} does not match the base model's adapter layers: missing "
            f"{missing[:4]}, unexpected {unexpected[:4]}; load it onto the base model it was trained on"
        )
    set_peft_model_state_dict(model, sd, adapter_name=ADAPTER)
    for p in model.parameters():
        p.requires_grad_(False)
    return model
