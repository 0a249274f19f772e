"""The MPT model family (llm-foundry semantics) as a transformers model; see `model.py`.

Its Hydra schema (`MPTModelConfig`, what `conf/model/mpt-*.yaml` may hold) is in `foundry.models.config` with
the `model` group's other schemas; `hf_config.py` is its transformers config (`MPTConfig`, what an exported
`config.json` holds).
"""

from foundry.models.config import AttnConfig, FFNConfig, InitConfig, MPTModelConfig
from foundry.models.mpt.hf_config import MODEL_TYPE, MPTConfig
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
