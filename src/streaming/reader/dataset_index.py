"""The shards of all streams of a dataset, concatenated in stream order, with per-shard and per-stream arrays.

Design note: the plan and random access need only numbers (samples per shard, which stream a shard belongs to,
offsets); the ``ShardInfo`` objects are needed only for shards that are actually read. Each stream gives a
``streaming.reader.index_cache.ShardTable`` (arrays, plus ``ShardInfo`` built on first use; a large index
comes from the node's binary cache), and ``AllShards`` is their concatenation as a read-only sequence, so no
process holds a Python object per shard of a 500k-shard dataset. The dataset-wide check that no column uses a
pickle encoding runs here, on the first unsafe shard each table recorded when it was parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streaming.format.index import ShardInfo
from streaming.format.reader import check_shard_safe
from streaming.reader.index_cache import ShardTable
from streaming.reader.shard_sequence import ShardSequence
from streaming.reader.stream import Stream

__all__ = ["AllShards", "DatasetShards", "EmptyStreamError", "load_dataset_shards"]


class AllShards(ShardSequence):
    """The shards of several tables as one sequence (global shard index), built on demand."""

    def __init__(self, tables: Sequence[ShardTable]) -> None:
        self.tables = list(tables)
        self._starts = np.cumsum([0] + [len(t) for t in self.tables]).tolist()

    def __len__(self) -> int:
        return self._starts[-1]

    def _shard(self, i: int) -> ShardInfo:
        t = int(np.searchsorted(self._starts, i, side="right")) - 1
        return self.tables[t][i - self._starts[t]]


@dataclass(frozen=True)
class DatasetShards:
    """Every shard of a dataset's streams, in global shard order (stream by stream)."""

    shards: AllShards
    samples_per_shard: np.ndarray
    """int64 [num_shards]."""
    bytes_per_shard: np.ndarray
    """int64 [num_shards]: bytes of all files of each shard."""
    stream_per_shard: np.ndarray
    """int64 [num_shards]: the stream each shard belongs to."""
    shards_per_stream: np.ndarray
    """int64 [num_streams]."""

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    @property
    def any_compressed(self) -> bool:
        return any(t.compressed for t in self.shards.tables)

    @property
    def shard_offset_per_stream(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.shards_per_stream)[:-1]]).astype(np.int64)

    @property
    def samples_per_stream(self) -> np.ndarray:
        return np.array([int(t.samples.sum()) for t in self.shards.tables], dtype=np.int64)

    @property
    def shard_ends(self) -> np.ndarray:
        """Cumulative samples at the end of each shard (int64 [num_shards])."""
        return np.cumsum(self.samples_per_shard, dtype=np.int64)


class EmptyStreamError(ValueError, RuntimeError):
    """A stream whose index lists no shards (a ``RuntimeError`` too, as mosaicml-streaming raises)."""


def load_dataset_shards(streams: Sequence[Stream], *, allow_unsafe_types: bool) -> DatasetShards:
    """Load every stream's shard table and check (unless ``allow_unsafe_types``) that no shard has a pickle
    column.

    Raises:
        ValueError: A shard with an unsafe column encoding (names the stream folder, the first such shard and
            its column), or a stream whose index lists no shards (as upstream refuses it).
    """
    tables = [s.shard_table() for s in streams]
    for s, t in zip(streams, tables):
        if len(t) == 0:
            raise EmptyStreamError(
                f"Stream contains no samples: {s.dirname}: index.json lists no shards (an empty dataset, or "
                "a writer that never finished); write samples to it or leave this stream out"
            )
    if not allow_unsafe_types:
        for s, t in zip(streams, tables):
            if t.first_unsafe >= 0:
                sh = t[t.first_unsafe]
                check_shard_safe(
                    sh, path=f"{s.dirname}: shard {sh.raw_data.basename}", allow_unsafe_types=False
                )
    counts = [len(t) for t in tables]
    return DatasetShards(
        shards=AllShards(tables),
        samples_per_shard=np.concatenate([t.samples for t in tables]).astype(np.int64),
        bytes_per_shard=np.concatenate([t.total_bytes for t in tables]).astype(np.int64),
        stream_per_shard=np.repeat(np.arange(len(tables), dtype=np.int64), counts),
        shards_per_stream=np.array(counts, dtype=np.int64),
    )
