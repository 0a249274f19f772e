"""Weight names across LoRA: a plain checkpoint into an adapted model, and adapter-only checkpoints.

Design note: injecting LoRA (`foundry.models.peft`) renames the adapted layers' weights
(`attn.Wqkv.weight` -> `attn.Wqkv.base_layer.weight`, plus `lora_A`/`lora_B` tensors; a `modules_to_save`
layer keeps an `original_module` and a trainable copy). Matching is by name only, so this module needs
neither `peft` nor the model classes: each model weight takes the stored tensor of its own name, else of its
name with the LoRA segment removed. Adapter weights may be absent only from a checkpoint that holds no
adapter at all (a base model: they keep their fresh init, B = 0), and base weights only from an
adapters-only checkpoint (`checkpoint.save_adapters_only`), whose base is loaded from elsewhere first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["KeyMatch", "is_adapter_key", "match_keys"]

_ADAPTER_MARKS = (
    ".lora_A.",
    ".lora_B.",
    ".lora_embedding_A.",
    ".lora_embedding_B.",
    ".lora_magnitude_vector.",
)
_TRAINED_COPY = ".modules_to_save."
_WRAPPERS = (".base_layer.", ".original_module.", ".modules_to_save.default.")


def is_adapter_key(name: str) -> bool:
    """Whether weight `name` belongs to an adapter (LoRA tensors, or a `modules_to_save` trained copy)."""
    return any(m in name for m in _ADAPTER_MARKS) or _TRAINED_COPY in name


def _plain(name: str) -> str:
    for w in _WRAPPERS:
        name = name.replace(w, ".")
    return name


@dataclass(frozen=True)
class KeyMatch:
    """How a checkpoint's weight names meet a model's."""

    source: dict[str, str]
    """Model weight name -> the stored name it loads from."""
    missing: list[str]
    """Model weights with no stored tensor that may not stay unloaded (an error when loading strictly)."""
    skipped: list[str]
    """Model weights with no stored tensor that may (adapters from a base checkpoint, or the base from an
    adapters-only one)."""
    unexpected: list[str]
    """Stored names no model weight takes."""


def match_keys(
    model_keys: Iterable[str], stored_keys: Iterable[str], *, adapters_only: bool = False
) -> KeyMatch:
    """Pairs every model weight with the stored tensor it loads from.

    Args:
        model_keys: The model's state-dict names. stored_keys: The checkpoint's.
        adapters_only: The checkpoint holds adapter weights only (the base is loaded separately).
    """
    stored = set(stored_keys)
    base_checkpoint = not any(is_adapter_key(k) for k in stored)
    source: dict[str, str] = {}
    missing: list[str] = []
    skipped: list[str] = []
    for key in sorted(model_keys):
        found = key if key in stored else _plain(key) if _plain(key) in stored else None
        if found is not None:
            source[key] = found
        elif (is_adapter_key(key) and base_checkpoint) or (adapters_only and not is_adapter_key(key)):
            skipped.append(key)
        else:
            missing.append(key)
    used = set(source.values())
    return KeyMatch(source, missing, skipped, sorted(stored - used))
