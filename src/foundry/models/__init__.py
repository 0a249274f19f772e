"""Models: MPT (llm-foundry semantics, a transformers model) and any transformers causal LM.

`build_model_on(cfg, device=...)` is the one way to get a model ready on a device. Nothing is registered at
import: call `register_model_configs(ConfigStore.instance())` for Hydra and `register_auto_classes()` (done
lazily by `load_pretrained`) for transformers' Auto classes. Every Hydra schema of the `model` group (the
`ModelConfig` base, MPT's, HF causal LMs') is in `config.py`, which nodes they are in `registry.py`; MPT's
transformers config is `mpt/hf_config.py`.
"""

from foundry.models.build import (
    build_model,
    build_model_on,
    build_mpt,
    load_pretrained,
    materialize_,
)
from foundry.models.config import (
    AttnConfig,
    FFNConfig,
    HFCausalLMConfig,
    InitConfig,
    ModelConfig,
    MPTModelConfig,
)
from foundry.models.mpt.auto import register_auto_classes
from foundry.models.registry import MODEL_SCHEMAS, model_schema_from_dict, register_model_configs

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
