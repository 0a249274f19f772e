"""Composer (llm-foundry) checkpoints read here, safely: a `.pt` file or a sharded folder becomes one of our
checkpoints (`to_foundry`), or a run's start point (`checkpoint.load_path=<composer checkpoint>`), without
running code from the file (`unpickle`; `.pt.zst`/`.pt.lz4` and object-store URLs: `compressed`). How each
piece maps: `mapping.MAPPING`. The way back: `export.to_composer` writes one of ours as a Composer `.pt`."""

from foundry.compat.composer.checkpoint import (
    ComposerCheckpoint,
    is_composer_checkpoint,
    read_composer_checkpoint,
)
from foundry.compat.composer.convert import as_foundry_start, composer_start, to_foundry
from foundry.compat.composer.export import to_composer
from foundry.compat.composer.mapping import MAPPING
from foundry.compat.composer.unpickle import UnsafeCheckpointError, load_pt

__all__ = [
    "MAPPING",
    "ComposerCheckpoint",
    "UnsafeCheckpointError",
    "as_foundry_start",
    "composer_start",
    "is_composer_checkpoint",
    "load_pt",
    "read_composer_checkpoint",
    "to_composer",
    "to_foundry",
]
