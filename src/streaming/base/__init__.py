"""mosaicml-streaming's import paths (``streaming.base...``), so code written for it runs unchanged.

Design note: thin aliases only; the implementation lives in ``streaming.reader`` (``dataset``, ``stream``,
``local``), ``streaming.loader`` (``dataloader``) and ``streaming.writers``. What is aliased is what user code
imports from mosaicml-streaming 0.13.0's public API: the dataset, loader, stream and writer classes,
``streaming.base.util``'s helpers, and ``streaming.base.format``'s writers and MDS encoding helpers. Upstream
internals (shared memory, partition and shuffle modules) are not promised. Re-exports are lazy, as in
``streaming``: importing this package does not import torch.
"""

from __future__ import annotations

from typing import Any

import streaming

# upstream's streaming.base names
__all__ = [name for name in streaming.__all__ if name != "merge_index"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'streaming.base' has no attribute {name!r}")
    return getattr(streaming, name)


def __dir__() -> list[str]:
    return sorted(__all__)
