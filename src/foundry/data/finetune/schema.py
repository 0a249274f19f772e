"""Re-exports `FinetuneDataConfig` from `foundry.data.config` (the `data` group's schemas), its old home."""

from foundry.data.config import FinetuneDataConfig

__all__ = ["FinetuneDataConfig"]
