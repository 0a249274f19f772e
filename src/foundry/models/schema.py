"""A typed model config from a plain mapping (a checkpoint manifest's `model_config`, a yaml body)."""

from __future__ import annotations

from typing import Any

__all__ = ["model_schema_from_dict"]


def model_schema_from_dict(body: dict[str, Any], *, hf: bool | None = None) -> Any:  # noqa: ANN401
    """`MPTModelConfig`, or `HFCausalLMConfig` when `hf` (default: when the mapping names a pretrained path).

    Validation runs as at compose time (unknown keys and bad values raise, naming the field).
    """
    from omegaconf import OmegaConf

    from foundry.models.hf_causal_lm import HFCausalLMConfig
    from foundry.models.mpt.config import MPTModelConfig

    if hf is None:
        hf = "pretrained_model_name_or_path" in body
    schema = HFCausalLMConfig if hf else MPTModelConfig
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), body))
