"""Models: MPT (llm-foundry semantics, a transformers model) and any transformers causal LM.

Nothing is registered at import: call `register_model_configs(ConfigStore.instance())` for Hydra and
`register_auto_classes()` (done lazily by `load_pretrained`) for transformers' Auto classes.
"""

from foundry.models.build import (
    build_model,
    build_mpt,
    load_pretrained,
    materialize_,
    register_model_configs,
)
from foundry.models.hf_causal_lm import HFCausalLMConfig
from foundry.models.mpt.auto import register_auto_classes
from foundry.models.mpt.config import AttnConfig, FFNConfig, InitConfig, ModelConfig, MPTModelConfig

__all__ = [
    "AttnConfig",
    "FFNConfig",
    "InitConfig",
    "ModelConfig",
    "MPTModelConfig",
    "HFCausalLMConfig",
    "build_model",
    "build_mpt",
    "load_pretrained",
    "materialize_",
    "register_auto_classes",
    "register_model_configs",
]
