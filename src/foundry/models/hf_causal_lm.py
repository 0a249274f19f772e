"""`hf_causal_lm`: any transformers causal LM (Llama, GPT-2, ...) by hub name or local path.

Design note: this is a thin adapter, not a wrapper class: the trainer gets the transformers model itself
(same `forward(input_ids, labels=...)` contract as our MPT), so nothing here needs updating when transformers
adds architectures. Network access is never assumed: a missing local/cached model fails with a message
naming the field to change. `init_device: meta` with `pretrained: true` (llm-foundry's big-model finetuning)
builds the architecture on meta and records the weights' folder; they are read when the model is
materialised, after FSDP sharding (`foundry.parallel.pretrained_load`). Its schema, `HFCausalLMConfig`, is
in `foundry.models.config` with the `model` group's other schemas (re-exported here).

Packed rows (`attn_uses_sequence_id`, which llm-foundry does not offer for HF models): a forward pre-hook,
registered on the model itself (so its class, parameter names and checkpoints stay transformers'), turns
the batch's `sequence_id` (B, S) into `position_ids` restarting at 0 per document and a block-diagonal
causal 4D mask (`foundry.models.documents`), which transformers' mask builder passes through untouched.
Only the `eager` (additive float mask) and `sdpa` (boolean mask) backends take such a mask; flash/flex
backends are refused at build time. Without the option the hook drops `sequence_id`, as MPT ignores it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from foundry.models.config import DOCUMENT_MASK_IMPLS, HFCausalLMConfig
from foundry.models.documents import document_causal_mask, document_positions
from foundry.models.mpt.auto import register_auto_classes
from foundry.parallel.pretrained_load import mark_pretrained, resolve_weights_folder

__all__ = ["DOCUMENT_MASK_IMPLS", "HFCausalLMConfig", "build_hf_causal_lm"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""`HFCausalLMConfig.dtype` (one of `foundry.models.config.HF_DTYPES`) -> the torch dtype."""


def build_hf_causal_lm(cfg: HFCausalLMConfig, *, vocab_size: int | None = None) -> nn.Module:
    """Builds the transformers model described by `cfg`.

    Args:
        cfg: the schema. vocab_size: when given and the model's embedding is smaller, it is resized to it.

    Raises:
        ValueError: when the model cannot be found locally (offline),
            naming `model.pretrained_model_name_or_path`.
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
    if cfg.pretrained and cfg.init_device != "meta":
        model = AutoModelForCausalLM.from_pretrained(name, config=config, dtype=dtype, **kwargs, **hub)
    else:
        with torch.device(cfg.init_device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
        # loaded when materialised: after sharding (FSDP) or by build_model_on
        if cfg.pretrained:
            mark_pretrained(model, resolve_weights_folder(name, local_files_only=cfg.local_files_only))
    if vocab_size is not None:
        weight = model.get_input_embeddings().weight
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{type(model).__name__}: the input embeddings' weight is not a tensor")
        if weight.shape[0] < vocab_size:
            model.resize_token_embeddings(vocab_size)
    impl = str(getattr(model.config, "_attn_implementation", None))
    if cfg.attn_uses_sequence_id and impl not in DOCUMENT_MASK_IMPLS:
        raise ValueError(
            f"model.attn_uses_sequence_id=true: {type(model).__name__} uses attention implementation "
            f"{impl!r}, which does not accept a custom 4D mask; set model.attn_implementation to one of "
            f"{list(DOCUMENT_MASK_IMPLS)}"
        )
    model.register_forward_pre_hook(
        DocumentMasking(enabled=cfg.attn_uses_sequence_id, eager=impl == "eager"), with_kwargs=True
    )
    return model


class DocumentMasking:
    """Forward pre-hook: consumes `sequence_id` (B, S); when enabled, sets per-document `position_ids`
    and a block-diagonal causal 4D `attention_mask` (the 2D padding mask is folded in: padding becomes a
    document of its own, so it is never seen by real tokens and no query row is empty).

    Args:
        enabled: `model.attn_uses_sequence_id`; when false `sequence_id` is dropped.
        eager: The model uses the eager backend (additive float mask) rather than sdpa (boolean mask).
    """

    def __init__(self, *, enabled: bool, eager: bool) -> None:
        self.enabled = enabled
        self.eager = eager

    def __call__(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        sequence_id = kwargs.pop("sequence_id", None)
        if not self.enabled:
            return args, kwargs
        if sequence_id is None:
            if module.training:
                raise ValueError("model.attn_uses_sequence_id=true needs `sequence_id` in training batches")
            return args, kwargs
        padding = kwargs.get("attention_mask")
        if padding is not None:
            if padding.dim() != 2:
                raise ValueError("sequence_id cannot be combined with a custom 4D attention_mask")
            # padding: its own document
            sequence_id = sequence_id.masked_fill(padding == 0, -1)
        if kwargs.get("position_ids") is None:
            kwargs["position_ids"] = document_positions(sequence_id)
        # (B, 1, S, S)
        mask = document_causal_mask(sequence_id)
        if self.eager:
            dtype = _compute_dtype(module)
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                ~mask, torch.finfo(dtype).min
            )
        kwargs["attention_mask"] = mask
        return args, kwargs


def _compute_dtype(module: nn.Module) -> torch.dtype:
    """The dtype attention scores are computed in: autocast's when enabled, else the parameters'."""
    param = next(module.parameters())
    device_type = param.device.type
    if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return param.dtype
