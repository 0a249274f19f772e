"""Re-exports `foundry.models.peft.config` (the `peft` group's schema), the module's former home."""

from foundry.models.peft.config import MPT_LORA_TARGETS, PeftConfig

__all__ = ["MPT_LORA_TARGETS", "PeftConfig"]
