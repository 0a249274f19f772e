"""``streaming.base.util`` (mosaicml-streaming's path): the helpers user code calls.

``clean_stale_shared_memory`` is a no-op: this library keeps no shared memory between runs (caches coordinate
through file locks, which the kernel drops with their holder), so there is never any to clean.
"""

from __future__ import annotations

from streaming.sizes import parse_bytes, parse_count
from streaming.writers.merge import merge_index

__all__ = ["bytes_to_int", "clean_stale_shared_memory", "get_list_arg", "merge_index", "number_abbrev_to_int"]


def get_list_arg(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; empty text -> ``[]``."""
    return text.split(",") if text else []


def bytes_to_int(bytes_str: int | str) -> int:
    """A byte size (``"64mb"``) in bytes."""
    return parse_bytes(bytes_str)


def number_abbrev_to_int(abbrev_str: int | str) -> int:
    """A count (``"100k"``) as an int."""
    return parse_count(abbrev_str)


def clean_stale_shared_memory() -> None:
    """Nothing to do: no shared memory outlives a run here."""
