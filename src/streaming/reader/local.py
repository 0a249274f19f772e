"""``LocalDataset``: map-style access to a dataset directory in any of the formats, no downloads.

Shards are opened lazily on first touch and kept mapped; a global sample index is located with a binary
search over cumulative shard sizes. Compressed shards are decompressed in memory (the dataset directory is
never written to), so read-only and shared directories work. Shard file names in ``index.json`` are untrusted:
``load_index`` refuses any name that would leave the directory (``streaming.util.safepath``) before a file is
opened.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from streaming.format.index import DatasetIndex, load_index
from streaming.format.reader import ShardReader, check_shard_safe, open_shard

__all__ = ["LocalDataset"]


class LocalDataset:
    """A local dataset directory (``index.json`` plus shards) as a sequence of sample dicts.

    Args:
        local: The dataset directory.
        split: Optional sub-directory holding the split's ``index.json``.
        allow_unsafe_types: Allow ``pkl`` columns.

    Supports ``len(ds)``, ``ds[i]`` (negative ints too), ``ds[a:b]``, ``ds[[i, j]]`` / numpy index arrays
    (lists of samples), and iteration.

    Raises:
        streaming.util.safepath.UnsafePathError: A shard name in ``index.json`` is absolute, has ``..``, a
            drive letter or a backslash (the message names the file, the field and the value).
    """

    def __init__(self, local: str, split: str | None = None, *, allow_unsafe_types: bool = False) -> None:
        self.local = local
        self.split = split
        self.index: DatasetIndex = load_index(local, split)
        self.dirname = self.index.dirname
        self._allow_unsafe = allow_unsafe_types
        self.samples_per_shard = [s.samples for s in self.index.shards]
        self._ends = list(accumulate(self.samples_per_shard))
        self.num_samples = self._ends[-1] if self._ends else 0
        self._readers: list[ShardReader | None] = [None] * len(self.index.shards)
        if not allow_unsafe_types:  # fail at construction, not at the first unsafe sample
            for shard in self.index.shards:
                check_shard_safe(shard, path=str(self.index.path), allow_unsafe_types=False)

    def __len__(self) -> int:
        return self.num_samples

    @property
    def size(self) -> int:
        return self.num_samples

    def shard_reader(self, shard_id: int) -> ShardReader:
        """The (cached) reader of one shard."""
        reader = self._readers[shard_id]
        if reader is None:
            reader = open_shard(
                self.dirname, self.index.shards[shard_id], allow_unsafe_types=self._allow_unsafe
            )
            self._readers[shard_id] = reader
        return reader

    def locate(self, index: int) -> tuple[int, int]:
        """Global sample index to ``(shard_id, index_in_shard)``."""
        shard = bisect.bisect_right(self._ends, index)
        return shard, index - (self._ends[shard - 1] if shard else 0)

    def get_item(self, index: int) -> dict[str, Any]:
        n = self.num_samples
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"sample index {index} out of range for a dataset of {n} samples")
        shard = bisect.bisect_right(self._ends, index)
        reader = self._readers[shard] or self.shard_reader(shard)
        return reader[index - (self._ends[shard - 1] if shard else 0)]

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Any:
        if isinstance(index, int | np.integer):
            return self.get_item(int(index))
        if isinstance(index, slice):
            return [self.get_item(i) for i in range(*index.indices(self.num_samples))]
        if isinstance(index, np.ndarray | list | tuple):
            return [self.get_item(int(i)) for i in np.asarray(index).reshape(-1)]
        raise TypeError(f"index must be an int, slice, list or numpy array, got {type(index).__name__}")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for shard_id in range(len(self.index.shards)):
            yield from self.shard_reader(shard_id)
