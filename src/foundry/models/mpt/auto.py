"""Registering the MPT family with transformers' Auto classes, so `AutoModelForCausalLM` loads `foundry_mpt`.

Design note: nothing is registered at import; `register_auto_classes()` is idempotent and called by whoever
loads a model through the Auto classes (`foundry.models.build.load_pretrained`, `build_hf_causal_lm`, the
lm-eval adapter). It lives with the model family it registers, below both builders, so neither has to import
the other.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from foundry.models.mpt.hf_config import MODEL_TYPE, MPTConfig
from foundry.models.mpt.model import MPTForCausalLM, MPTModel

__all__ = ["register_auto_classes"]


def register_auto_classes() -> None:
    """Registers `foundry_mpt` with AutoConfig / AutoModel / AutoModelForCausalLM (idempotent, offline)."""
    try:
        AutoConfig.register(MODEL_TYPE, MPTConfig)
    except ValueError:
        # already registered (by us)
        pass
    for auto, cls in ((AutoModel, MPTModel), (AutoModelForCausalLM, MPTForCausalLM)):
        try:
            auto.register(MPTConfig, cls)
        except ValueError:
            pass
