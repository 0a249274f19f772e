"""The MPT model family (llm-foundry semantics) as a transformers model; see `model.py`."""

from foundry.models.mpt.config import AttnConfig, FFNConfig, InitConfig, MPTModelConfig
from foundry.models.mpt.configuration import MODEL_TYPE, MPTConfig
from foundry.models.mpt.model import MPTForCausalLM, MPTModel

__all__ = [
    "AttnConfig",
    "FFNConfig",
    "InitConfig",
    "MPTModelConfig",
    "MPTConfig",
    "MODEL_TYPE",
    "MPTModel",
    "MPTForCausalLM",
]
