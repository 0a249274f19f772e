"""Checkpoints: save to any store during training, find the newest complete one, resume or load weights.

`Checkpointer` saves (full or sharded, asynchronously, published by a manifest); `resolve_start` +
`load_into` implement autoresume and `load_path`; `load_weights` is for evaluation and conversion.
"""

from foundry.checkpoint.config import CheckpointConfig
from foundry.checkpoint.layout import CheckpointInfo, Manifest, find_checkpoints, find_latest, open_checkpoint
from foundry.checkpoint.resume import StartPoint, config_differences, load_into, load_weights, resolve_start
from foundry.checkpoint.saver import Checkpointer, resolve_format
from foundry.checkpoint.store import CheckpointStore

__all__ = [
    "CheckpointConfig",
    "CheckpointInfo",
    "CheckpointStore",
    "Checkpointer",
    "Manifest",
    "StartPoint",
    "config_differences",
    "find_checkpoints",
    "find_latest",
    "load_into",
    "load_weights",
    "open_checkpoint",
    "resolve_format",
    "resolve_start",
]
