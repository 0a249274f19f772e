"""streaming: MDS/JSONL/CSV shard datasets, byte-compatible with mosaicml-streaming.

A standalone library: it never imports ``foundry``. Public names are re-exported lazily so that
``import streaming`` stays cheap (no torch import until a dataset class is touched).

Layout (the top level holds only this note, ``__main__`` and ``safepath``, an alias at the path SECURITY.md
names): ``reader`` (``StreamingDataset`` and its parts, ``Stream``, ``LocalDataset``, ``World``) reads through
the node-level shard ``cache``; ``loader`` (``StreamingDataLoader``, worker batches) builds on ``reader``;
``format`` (shard layouts, encodings, compression, hashes, index), ``plan`` (epoch order: partition, shuffle,
sampling) and ``storage`` (URLs, backends, transfers) are shared by reading and writing; ``util`` (sizes, path
safety) sits under everything; ``writers`` (MDS and line-format writers, outputs, ``merge_index``) and
``tools`` (``python -m streaming``: inspect, validate, rebuild-index) sit on top; ``base`` holds
mosaicml-streaming's import paths (aliases).
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
    "MDSWriter": "streaming.writers.mds",
    "JSONWriter": "streaming.writers.text",
    "CSVWriter": "streaming.writers.text",
    "TSVWriter": "streaming.writers.text",
    "XSVWriter": "streaming.writers.text",
    "LocalDataset": "streaming.reader.local",
    "merge_index": "streaming.writers.merge",
    "Stream": "streaming.reader.stream",
    "StreamingDataset": "streaming.reader.dataset",
    "StreamingDataLoader": "streaming.loader.dataloader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streaming' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
