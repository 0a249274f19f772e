"""Models: MPT (llm-foundry semantics, a transformers model) and any transformers causal LM.

`build_model_on(cfg, device=...)` is the one way to get a model ready on a device. Nothing is registered at
import: call `register_model_configs(ConfigStore.instance())` for Hydra and `register_auto_classes()` (done
lazily by `load_pretrained`) for transformers' Auto classes. Each model's Hydra schema is in a `schema.py`
(`ModelConfig`, the base, in `foundry.models.schema` beside the registry), MPT's transformers config in
`mpt/hf_config.py`.
"""

from foundry.models.build import (
    build_model,
    build_model_on,
    build_mpt,
    load_pretrained,
    materialize_,
)
from foundry.models.hf_causal_lm import HFCausalLMConfig
from foundry.models.mpt.auto import register_auto_classes
from foundry.models.mpt.schema import AttnConfig, FFNConfig, InitConfig, MPTModelConfig
from foundry.models.registry import MODEL_SCHEMAS, model_schema_from_dict, register_model_configs
from foundry.models.schema import ModelConfig

__all__ = [
    "AttnConfig",
    "FFNConfig",
    "InitConfig",
    "MODEL_SCHEMAS",
    "ModelConfig",
    "MPTModelConfig",
    "HFCausalLMConfig",
    "build_model",
    "build_model_on",
    "build_mpt",
    "load_pretrained",
    "materialize_",
    "model_schema_from_dict",
    "register_auto_classes",
    "register_model_configs",
]
