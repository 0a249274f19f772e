"""`hf_causal_lm`: any transformers causal LM (Llama, GPT-2, ...) by hub name or local path.

Design note: this is a thin adapter, not a wrapper class: the trainer gets the transformers model itself
(same `forward(input_ids, labels=...)` contract as our MPT), so nothing here needs updating when transformers
adds architectures. Network access is never assumed: a missing local/cached model fails with a message
naming the field to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from foundry.models.mpt.auto import register_auto_classes
from foundry.models.schema import ModelConfig

__all__ = ["HFCausalLMConfig", "build_hf_causal_lm"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(kw_only=True)
class HFCausalLMConfig(ModelConfig):
    """A transformers `AutoModelForCausalLM` checkpoint or architecture."""

    pretrained_model_name_or_path: str
    """Hub name (needs a local HF cache offline) or a local folder with config.json (+ weights)."""
    pretrained: bool = True
    """Load the weights (true) or only the architecture, randomly initialised (false)."""
    trust_remote_code: bool = False
    local_files_only: bool = True
    """Never touch the network (folder or HF cache only); set false to allow hub downloads."""
    attn_implementation: str | None = "sdpa"
    """transformers attention backend (`sdpa`, `eager`, `flash_attention_2`) or null for its default."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16."""
    init_device: str = "cpu"
    """`cpu`, `cuda` or `meta` (architecture only)."""
    config_overrides: dict[str, Any] = field(default_factory=dict)
    """Set on the transformers config before building (e.g. {num_hidden_layers: 2})."""

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"model.dtype={self.dtype!r}: choose one of {sorted(_DTYPES)}")
        if self.init_device == "meta" and self.pretrained:
            raise ValueError(
                "model.init_device=meta needs model.pretrained=false (weights cannot load on meta)"
            )


def build_hf_causal_lm(cfg: HFCausalLMConfig, *, vocab_size: int | None = None) -> nn.Module:
    """Builds the transformers model described by `cfg`.

    Args:
        cfg: the schema. vocab_size: when given and the model's embedding is smaller, it is resized to it.

    Raises:
        ValueError: when the model cannot be found locally (offline), naming `model.pretrained_model_name_or_path`.
    """
    register_auto_classes()
    name = cfg.pretrained_model_name_or_path
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    hub = {"local_files_only": cfg.local_files_only}
    try:
        config = AutoConfig.from_pretrained(name, **kwargs, **hub)
    except OSError as err:
        raise ValueError(
            f"could not load a transformers config for model.pretrained_model_name_or_path={name!r} ({err}). "
            "Pass a local folder containing config.json (and weights when model.pretrained=true), or set "
            "model.local_files_only=false to allow a hub download."
        ) from err
    for key, value in cfg.config_overrides.items():
        if not hasattr(config, key):
            raise ValueError(
                f"model.config_overrides.{key}: {type(config).__name__} has no attribute {key!r}"
            )
        setattr(config, key, value)
    if cfg.attn_implementation is not None:
        kwargs["attn_implementation"] = cfg.attn_implementation
    dtype = _DTYPES[cfg.dtype]
    if cfg.pretrained:
        model = AutoModelForCausalLM.from_pretrained(name, config=config, dtype=dtype, **kwargs, **hub)
    else:
        with torch.device(cfg.init_device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    if vocab_size is not None:
        weight = model.get_input_embeddings().weight
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{type(model).__name__}: the input embeddings' weight is not a tensor")
        if weight.shape[0] < vocab_size:
            model.resize_token_embeddings(vocab_size)
    return model
