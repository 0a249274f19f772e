"""streaming: MDS/JSONL/CSV shard datasets, byte-compatible with mosaicml-streaming.

A standalone library: it never imports ``foundry``. Public names are re-exported lazily so that
``import streaming`` stays cheap (no torch import until a dataset class is touched).

Layout: reading is the top level (``dataset``, ``dataloader``, ``stream``, ``local``, ``world``) with the
shard ``cache`` of remote streams; ``format`` (shard layouts, encodings, compression, hashes, index),
``plan`` (epoch order: partition, shuffle, sampling) and ``storage`` (URLs, backends, transfers) are shared
by reading and writing; ``writers`` (MDS and line-format writers, outputs, ``merge_index``) and ``tools``
(``python -m streaming``: inspect, validate, rebuild-index) sit on top.
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
    "LocalDataset": "streaming.local",
    "merge_index": "streaming.writers.merge",
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
