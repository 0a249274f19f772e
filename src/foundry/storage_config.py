"""Re-exports `foundry.storage.config` (the `storage` group's schema), the module's former home."""

from foundry.storage.config import StorageConfig, StorageProfileConfig, apply_storage

__all__ = ["StorageConfig", "StorageProfileConfig", "apply_storage"]
