"""Object storage settings for a run: the `storage` group's schema (`config.py`) and `apply_storage`.

The settings themselves belong to `streaming.storage.profiles`; this package only declares, validates and
installs them (see `foundry.storage.config`).
"""

from foundry.storage.config import StorageConfig, StorageProfileConfig, apply_storage

__all__ = ["StorageConfig", "StorageProfileConfig", "apply_storage"]
