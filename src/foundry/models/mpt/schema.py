"""Re-exports MPT's Hydra schema from `foundry.models.config` (the `model` group's schemas), its old home."""

from foundry.models.config import (
    AttnConfig,
    FFNConfig,
    InitConfig,
    MPTModelConfig,
    resolve_kv_heads,
    validate_mpt_fields,
)

__all__ = [
    "AttnConfig",
    "FFNConfig",
    "InitConfig",
    "MPTModelConfig",
    "resolve_kv_heads",
    "validate_mpt_fields",
]
