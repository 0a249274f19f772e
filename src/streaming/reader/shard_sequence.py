"""``ShardSequence``: a read-only sequence of shards whose ``ShardInfo`` objects are built on demand.

Design note: a 500k-shard dataset must not hold a Python object per shard, so both one stream's shards
(``streaming.reader.index_cache.ShardTable``) and the concatenation of all streams'
(``streaming.reader.dataset_index.AllShards``) are sequences that build a shard when it is asked for. The
sequence protocol they share lives here, once: slices (a list), negative indexes and the range check (an
``IndexError`` naming the shard and the count). A subclass gives only ``__len__`` and ``_shard(i)`` for
``0 <= i < len(self)``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import overload

from streaming.format.index import ShardInfo

__all__ = ["ShardSequence"]


class ShardSequence(Sequence[ShardInfo]):
    """Shards by index (negative counts from the end), slices as lists;
    subclasses build one shard at a time."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _shard(self, i: int) -> ShardInfo:
        """Shard ``i``, with ``0 <= i < len(self)`` already checked."""

    @overload
    def __getitem__(self, i: int) -> ShardInfo: ...

    @overload
    def __getitem__(self, i: slice) -> list[ShardInfo]: ...

    def __getitem__(self, i: int | slice) -> ShardInfo | list[ShardInfo]:
        n = len(self)
        if isinstance(i, slice):
            return [self._shard(k) for k in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError(f"shard {i} out of range for {n} shards")
        return self._shard(i % n)
