"""Re-exports `ModelConfig` from `foundry.models.config` (the `model` group's schemas), its former home."""

from foundry.models.config import ModelConfig

__all__ = ["ModelConfig"]
