"""The `model` config group's registry: the schema of each node, Hydra registration, a schema from a mapping.

Design note: no registry is filled by importing a module. `MODEL_SCHEMAS` names the schema of each node
(`model/_mpt`, `model/_hf_causal_lm`: the names `conf/model/*.yaml` files extend). `register_model_configs`
stores them in a Hydra `ConfigStore` when config composition asks (idempotent), and `model_schema_from_dict`
turns a plain mapping (a checkpoint manifest's `model_config`, a yaml body) into the same typed schemas.
The schemas themselves (`ModelConfig` and its subclasses) are beside this module in `config.py`.
"""

from __future__ import annotations

from typing import Any

from foundry.models.config import HFCausalLMConfig, ModelConfig, MPTModelConfig

__all__ = ["MODEL_SCHEMAS", "model_schema_from_dict", "register_model_configs"]

MODEL_SCHEMAS: dict[str, type[ModelConfig]] = {"_mpt": MPTModelConfig, "_hf_causal_lm": HFCausalLMConfig}
"""The `model` group's schema nodes: node name -> schema class."""


# `cs`: hydra's ConfigStore (not imported here)
def register_model_configs(cs: Any) -> None:
    """Stores the `model` group schema nodes (`MODEL_SCHEMAS`) in a Hydra `ConfigStore`."""
    for name, schema in MODEL_SCHEMAS.items():
        cs.store(group="model", name=name, node=schema)


def model_schema_from_dict(body: dict[str, Any], *, hf: bool | None = None) -> Any:
    """`MPTModelConfig`, or `HFCausalLMConfig` when `hf` (default: when the mapping names a pretrained path).

    Validation runs as at compose time (unknown keys and bad values raise, naming the field).
    """
    # local: `foundry.models` leaves omegaconf (a Hydra dependency) unimported until a mapping is merged
    from omegaconf import OmegaConf

    if hf is None:
        hf = "pretrained_model_name_or_path" in body
    schema = HFCausalLMConfig if hf else MPTModelConfig
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), body))
