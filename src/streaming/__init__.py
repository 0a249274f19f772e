"""streaming: MDS/JSONL/CSV shard datasets, byte-compatible with mosaicml-streaming.

A standalone library: it never imports ``foundry``. Public names are re-exported lazily so that
``import streaming`` stays cheap (no torch import until a dataset class is touched).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CSVWriter",
    "JSONWriter",
    "LocalDataset",
    "MDSWriter",
    "Stream",
    "StreamingDataLoader",
    "StreamingDataset",
    "TSVWriter",
    "XSVWriter",
    "merge_index",
]

_LAZY = {
    "MDSWriter": "streaming.writer",
    "JSONWriter": "streaming.text_writer",
    "CSVWriter": "streaming.text_writer",
    "TSVWriter": "streaming.text_writer",
    "XSVWriter": "streaming.text_writer",
    "LocalDataset": "streaming.local",
    "merge_index": "streaming.merge",
    "Stream": "streaming.stream",
    "StreamingDataset": "streaming.dataset",
    "StreamingDataLoader": "streaming.dataloader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streaming' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
