"""`ModelConfig`: the base class of every `model` config group schema.

Design note: `TrainConfig.model` is typed with this base so Hydra accepts any registered model schema in its
place (`MPTModelConfig` in `mpt/schema.py`, `HFCausalLMConfig` in `hf_causal_lm.py`). It sits at the top of
the models package, beside the registry (`registry.py`: which schema each `model/_<name>` node is, Hydra
registration, a schema from a plain mapping), and below every schema: the registry imports the schemas and
the schemas extend this class, so base and registry are two modules or the imports would form a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundry.models.peft.schema import PeftConfig

__all__ = ["ModelConfig"]


@dataclass(kw_only=True)
class ModelConfig:
    """Base of every `model` group schema (`TrainConfig.model` is typed with it; subclasses swap in)."""

    peft_config: PeftConfig | None = None
    """LoRA adapters (`foundry.models.peft`): null trains every weight; set to train adapters only."""

    def uses_sequence_id(self) -> bool:
        """Whether the model wants `sequence_id` (B, S) in its batches (document masking of packed rows)."""
        return False
