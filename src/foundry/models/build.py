"""Building models from their Hydra schemas, ready on a device: `build_model_on`, the one way to get a model.

Design note: a model is built in three steps that every caller used to write itself: create the module
from its schema (`build_model`: MPT on an init device, or any transformers causal LM), materialise it (a
meta-device MPT is allocated and initialised by `materialize_`, or given a checkpoint's tensors), and move
it to the run's device (a meta-built transformers causal LM marked `pretrained` reads its safetensors
instead of being initialised, `foundry.parallel.pretrained_load`). `build_model_on` does all three; training,
`task=eval`, the lm-eval adapter, checkpoint conversion and the benchmarks call it. FSDP keeps the meta model
(`defer_init`) and materialises per shard after wrapping (`foundry.parallel.meta_init`). Casting to a dtype
stays with the caller that loads weights (the lm-eval adapter): weights load at full precision, then cast.
Nothing is registered at import: the schema nodes are in `registry.py`, and
`foundry.models.mpt.auto.register_auto_classes()` tells transformers about model_type `foundry_mpt` when
`load_pretrained` (here) or `build_hf_causal_lm` needs it. LoRA (`model.peft_config`) is part of creating the
module: `build_model` injects the adapters (base frozen) into the model it built, so a schema with adapters
always means a module with adapters, whether its weights are then initialised, materialised after sharding, or
assigned from a checkpoint that holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from foundry.models.config import HFCausalLMConfig, ModelConfig, MPTModelConfig
from foundry.models.hf_causal_lm import build_hf_causal_lm
from foundry.models.mpt.auto import register_auto_classes
from foundry.models.mpt.hf_config import MPTConfig
from foundry.models.mpt.init import init_model_
from foundry.models.mpt.model import MPTForCausalLM
from foundry.parallel.meta_init import is_meta
from foundry.parallel.pretrained_load import materialize_or_load_, pretrained_folder
from foundry.tokenizers import padded_vocab_size

__all__ = [
    "build_model",
    "build_model_on",
    "build_mpt",
    "check_vocab_fits",
    "materialize_",
    "load_pretrained",
]


def build_mpt(cfg: MPTModelConfig, *, vocab_size: int | None = None, device: str | None = None) -> nn.Module:
    """Builds an `MPTForCausalLM` from its schema.

    Args:
        cfg: the schema. vocab_size: overrides `cfg.vocab_size` (e.g. the tokenizer's, padded).
        device: overrides `cfg.init_device` (`cpu`, `cuda`, `meta`).
    """
    overrides: dict[str, Any] = {} if vocab_size is None else {"vocab_size": vocab_size}
    # the adapters are not part of the transformers config (`build_model` applies them to the module)
    body = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "peft_config"}
    config = MPTConfig(**{**body, **overrides})
    with torch.device(device or cfg.init_device):
        return MPTForCausalLM(config)


def build_model(cfg: ModelConfig, *, vocab_size: int | None = None, device: str | None = None) -> nn.Module:
    """Creates the module a `model` group schema describes (MPT or any transformers causal LM), unplaced.

    The first step of `build_model_on`, which also materialises a meta-created MPT and moves the model to a
    device; call this directly only for the module exactly where its schema creates it (tests, param counts).

    Args:
        cfg: an `MPTModelConfig` or `HFCausalLMConfig` (from `OmegaConf.to_object`, never a DictConfig).
        vocab_size: the tokenizer's vocabulary size when it should override the config's.
        device: overrides an MPT schema's `init_device` (a transformers causal LM uses its own).

    Returns:
        A transformers `PreTrainedModel` whose `forward(input_ids, labels=...)` returns `.loss` / `.logits`;
        with `cfg.peft_config`, LoRA adapters injected and only they trainable.
    """
    if isinstance(cfg, MPTModelConfig):
        model = build_mpt(cfg, vocab_size=vocab_size, device=device)
    elif isinstance(cfg, HFCausalLMConfig):
        model = build_hf_causal_lm(cfg, vocab_size=vocab_size)
    else:
        raise TypeError(f"build_model got {type(cfg).__name__}; expected MPTModelConfig or HFCausalLMConfig")
    if cfg.peft_config is None:
        return model
    if pretrained_folder(model) is not None:
        raise ValueError(
            "model.peft_config with model.init_device=meta and model.pretrained=true is not supported yet "
            "(the adapters rename the checkpoint's tensors); set model.init_device=cpu"
        )
    # local: `peft` is an optional dependency (2 s to import), needed only when adapters are configured
    from foundry.models.peft.inject import apply_peft

    return apply_peft(model, cfg.peft_config)


def build_model_on(
    cfg: ModelConfig,
    *,
    device: torch.device | str,
    # a transformers tokenizer (only len() is used)
    tokenizer: Any | None = None,
    init_device: str | None = None,
    defer_init: bool = False,
    state_dict: Mapping[str, torch.Tensor] | None = None,
) -> nn.Module:
    """The model `cfg` describes, ready on `device`: how training, eval, the lm-eval adapter, checkpoint
    conversion and the benchmarks all get a model.

    An MPT is created on `init_device` (default: the schema's `init_device`), then materialised: from
    `state_dict` when given (its tensors are assigned, nothing is initialised), by `materialize_` on `device`
    when created on meta, else moved with `.to(device)`. A transformers causal LM (`HFCausalLMConfig`) is
    built as its schema says (its own `init_device`, pretrained weights) and moved to `device`. The same
    schema, seed and arguments give the same weights: a meta-created MPT draws them in `materialize_`'s
    order, a CPU/GPU-created one in the constructor's (they differ, so callers keep their `init_device`).

    Args:
        cfg: The `model` group schema (`MPTModelConfig` or `HFCausalLMConfig`).
        device: Where the weights live.
        tokenizer: Its `len()` must fit in an MPT's `vocab_size`; None (`tokenizer.name=null`, rows of token
            ids) skips the check (the collator checks ids against `model.vocab_size`).
        init_device: Overrides an MPT schema's `init_device` (e.g. `meta` when weights are loaded next).
        defer_init: Keep a meta-created model on meta, for FSDP to shard it before `materialize_or_load_`
            (which loads the pretrained weights of an `init_device: meta` + `pretrained: true` one).
        state_dict: Weights to assign instead of initialising (an MPT is then created on meta); the module's
            non-persistent buffers (position tables, ALiBi slopes) are rebuilt on `device`.

    Raises:
        ValueError: The tokenizer has more tokens than `model.vocab_size`, naming the padded size to set;
            `defer_init` with `state_dict`.
    """
    if defer_init and state_dict is not None:
        raise ValueError(
            "build_model_on: defer_init=True leaves weights on meta; it cannot take a state_dict"
        )
    if not isinstance(cfg, MPTModelConfig):
        model = build_model(cfg)
        if state_dict is not None:
            return _assign_weights(model, state_dict, device=device).to(device)
        if not is_meta(model):
            return model.to(device)
        # meta (`init_device: meta`): pretrained weights are loaded, others initialised, after FSDP sharding
        return model if defer_init else materialize_or_load_(model, device=device)
    check_vocab_fits(cfg, tokenizer)
    where = "meta" if state_dict is not None else init_device or cfg.init_device
    model = build_model(cfg, device=where)
    if state_dict is not None:
        return _assign_weights(model, state_dict, device=device).to(device)
    if where != "meta":
        return model.to(device)
    return model if defer_init else materialize_(model, device=device)


def check_vocab_fits(cfg: MPTModelConfig, tokenizer: Any | None) -> None:
    """Raises ValueError when `tokenizer` has more tokens than `cfg.vocab_size`, naming the size to set."""
    vocab = 0 if tokenizer is None else len(tokenizer)
    if vocab > cfg.vocab_size:
        raise ValueError(
            f"the tokenizer has {vocab} tokens but model.vocab_size={cfg.vocab_size}; set model.vocab_size "
            f"to at least {vocab} (a multiple of 64, e.g. {padded_vocab_size(tokenizer)})"
        )


def _assign_weights(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor], *, device: torch.device | str
) -> nn.Module:
    """Assigns `state_dict`'s tensors as the parameters (strict); rebuilds meta buffers on `device`."""
    model.load_state_dict(state_dict, strict=True, assign=True)
    # non-persistent buffers (ALiBi, position tables) are rebuilt, not stored
    for module in model.modules():
        reset = getattr(module, "reset_buffers", None)
        if reset is not None and any(b.is_meta for b in module.buffers(recurse=False)):
            module.to_empty(device=device, recurse=False)
            reset()
    return model


@torch.no_grad()
def materialize_(model: nn.Module, *, device: str | torch.device) -> nn.Module:
    """Allocates a meta-device MPT on `device` and initialises it (weights by init_config, position tables).

    Call after sharding wrappers are applied if you want per-shard allocation; the model module is returned.
    """
    model.to_empty(device=device)
    # an MPTConfig (nn.Module.__getattr__ is typed Tensor | Module)
    cfg: Any = model.config
    # set by LoRA injection: adapters get their own init
    init = model.__dict__.get("_init_weights")
    if callable(init):
        # the order `foundry.parallel.meta_init` uses: same weights sharded
        for module in model.modules():
            init(module)
        return model
    init_model_(model, cfg=cfg.init, d_model=cfg.d_model, n_layers=cfg.n_layers)
    return model


def load_pretrained(path: str | Path, **kwargs: Any) -> nn.Module:
    """`AutoModelForCausalLM.from_pretrained(path)` after registering `foundry_mpt` (offline-safe)."""
    register_auto_classes()
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
