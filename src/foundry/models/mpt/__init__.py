"""The MPT model family (llm-foundry semantics) as a transformers model; see `model.py`.

`schema.py` is its Hydra schema (`MPTModelConfig`, what `conf/model/mpt-*.yaml` may hold); `hf_config.py` its
transformers config (`MPTConfig`, what an exported `config.json` holds).
"""

from foundry.models.mpt.hf_config import MODEL_TYPE, MPTConfig
from foundry.models.mpt.model import MPTForCausalLM, MPTModel
from foundry.models.mpt.schema import AttnConfig, FFNConfig, InitConfig, MPTModelConfig

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
