"""Building models from their Hydra schemas, and registering schemas / Auto classes explicitly.

Design note: no registry is filled by importing a module. `register_model_configs(cs)` stores the typed
schema nodes (`model/_mpt`, `model/_hf_causal_lm`) and `foundry.models.mpt.auto.register_auto_classes()`
tells transformers about model_type `foundry_mpt`; both are idempotent and called by whoever needs them
(config composition, `load_pretrained` here, `build_hf_causal_lm`). Meta-device models are materialised
with `materialize_`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from foundry.models.hf_causal_lm import HFCausalLMConfig, build_hf_causal_lm
from foundry.models.mpt.auto import register_auto_classes
from foundry.models.mpt.config import ModelConfig, MPTModelConfig
from foundry.models.mpt.configuration import MPTConfig
from foundry.models.mpt.init import init_model_
from foundry.models.mpt.model import MPTForCausalLM
from foundry.tokenizers import padded_vocab_size

__all__ = [
    "build_model",
    "build_model_for",
    "build_mpt",
    "materialize_",
    "register_model_configs",
    "load_pretrained",
]


def register_model_configs(cs: Any) -> None:  # noqa: ANN401 - hydra's ConfigStore (not imported here)
    """Stores the `model` group schema nodes `_mpt` and `_hf_causal_lm` in a Hydra `ConfigStore`."""
    cs.store(group="model", name="_mpt", node=MPTModelConfig)
    cs.store(group="model", name="_hf_causal_lm", node=HFCausalLMConfig)


def build_mpt(cfg: MPTModelConfig, *, vocab_size: int | None = None, device: str | None = None) -> nn.Module:
    """Builds an `MPTForCausalLM` from its schema.

    Args:
        cfg: the schema. vocab_size: overrides `cfg.vocab_size` (e.g. the tokenizer's, padded).
        device: overrides `cfg.init_device` (`cpu`, `cuda`, `meta`).
    """
    overrides: dict[str, Any] = {} if vocab_size is None else {"vocab_size": vocab_size}
    config = MPTConfig.from_schema(cfg, **overrides)
    with torch.device(device or cfg.init_device):
        return MPTForCausalLM(config)


def build_model(cfg: ModelConfig, *, vocab_size: int | None = None, device: str | None = None) -> nn.Module:
    """Builds the model a `model` group schema describes (MPT or any transformers causal LM).

    Args:
        cfg: an `MPTModelConfig` or `HFCausalLMConfig` (from `OmegaConf.to_object`, never a DictConfig).
        vocab_size: the tokenizer's vocabulary size when it should override the config's.
        device: overrides the schema's `init_device`.

    Returns:
        A transformers `PreTrainedModel` whose `forward(input_ids, labels=...)` returns `.loss` / `.logits`.
    """
    if isinstance(cfg, MPTModelConfig):
        return build_mpt(cfg, vocab_size=vocab_size, device=device)
    if isinstance(cfg, HFCausalLMConfig):
        return build_hf_causal_lm(cfg, vocab_size=vocab_size)
    raise TypeError(f"build_model got {type(cfg).__name__}; expected MPTModelConfig or HFCausalLMConfig")


def build_model_for(
    cfg: ModelConfig,
    tokenizer: Any | None,  # noqa: ANN401 - a transformers tokenizer (only len() is used)
    *,
    device: torch.device | str,
    defer_init: bool = False,
) -> nn.Module:
    """Builds the model `cfg` describes for `tokenizer`, on `device` (what pretraining and `task=eval` use).

    Args:
        cfg: The `model` group schema.
        tokenizer: Its `len()` must fit in an MPT's `vocab_size`; None (`tokenizer.name=null`, rows of token
            ids) skips the check (the collator checks ids against `model.vocab_size`).
        device: Where the weights live.
        defer_init: Keep a meta-device MPT (`init_device: meta`) on meta, for FSDP to shard it first.

    Raises:
        ValueError: The tokenizer has more tokens than `model.vocab_size`, naming the padded size to set.
    """
    if isinstance(cfg, MPTModelConfig):
        vocab = 0 if tokenizer is None else len(tokenizer)
        if vocab > cfg.vocab_size:
            raise ValueError(
                f"the tokenizer has {vocab} tokens but model.vocab_size={cfg.vocab_size}; set model.vocab_size "
                f"to at least {vocab} (a multiple of 64, e.g. {padded_vocab_size(tokenizer)})"
            )
        if cfg.init_device == "meta":
            if defer_init:
                return build_model(cfg, device="meta")
            return materialize_(build_model(cfg, device="meta"), device=device)
        return build_model(cfg, device=cfg.init_device).to(device)
    return build_model(cfg).to(device)


@torch.no_grad()
def materialize_(model: nn.Module, *, device: str | torch.device) -> nn.Module:
    """Allocates a meta-device MPT on `device` and initialises it (weights by init_config, position tables).

    Call after sharding wrappers are applied if you want per-shard allocation; the model module is returned.
    """
    model.to_empty(device=device)
    cfg: Any = model.config  # an MPTConfig (nn.Module.__getattr__ is typed Tensor | Module)
    init_model_(model, cfg=cfg.init, d_model=cfg.d_model, n_layers=cfg.n_layers)
    return model


def load_pretrained(path: str | Path, **kwargs: Any) -> nn.Module:  # noqa: ANN401
    """`AutoModelForCausalLM.from_pretrained(path)` after registering `foundry_mpt` (offline-safe)."""
    register_auto_classes()
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
