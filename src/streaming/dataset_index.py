"""The shards of all streams of a dataset, concatenated in stream order, with per-shard and per-stream arrays.

Design note: the plan and random access need only numbers (samples per shard, which stream a shard belongs to,
offsets); the ``ShardInfo`` objects are needed only for shards that are actually read. This module is the one
place that turns the streams' indexes into those arrays, and the one place the dataset-wide safety check of
column encodings runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streaming.format.index import ShardInfo
from streaming.format.reader import check_shard_safe
from streaming.stream import Stream

__all__ = ["DatasetShards", "load_dataset_shards"]


@dataclass(frozen=True)
class DatasetShards:
    """Every shard of a dataset's streams, in global shard order (stream by stream)."""

    shards: Sequence[ShardInfo]
    samples_per_shard: np.ndarray
    """int64 [num_shards]."""
    stream_per_shard: np.ndarray
    """int64 [num_shards]: the stream each shard belongs to."""
    shards_per_stream: np.ndarray
    """int64 [num_streams]."""

    @property
    def num_shards(self) -> int:
        return len(self.samples_per_shard)

    @property
    def shard_offset_per_stream(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.shards_per_stream)[:-1]]).astype(np.int64)

    @property
    def samples_per_stream(self) -> np.ndarray:
        return np.array(
            [
                int(self.samples_per_shard[self.stream_per_shard == i].sum())
                for i in range(len(self.shards_per_stream))
            ],
            dtype=np.int64,
        )

    @property
    def shard_ends(self) -> np.ndarray:
        """Cumulative samples at the end of each shard (int64 [num_shards])."""
        return np.cumsum(self.samples_per_shard, dtype=np.int64)


def load_dataset_shards(streams: Sequence[Stream], *, allow_unsafe_types: bool) -> DatasetShards:
    """Load every stream's index and check (unless ``allow_unsafe_types``) that no shard has a pickle column.

    Raises:
        ValueError: A shard with an unsafe column encoding (names the stream folder, shard and column).
    """
    shards: list[ShardInfo] = []
    stream_per_shard: list[int] = []
    per_stream: list[int] = []
    for i, s in enumerate(streams):
        own = s.index().shards
        shards.extend(own)
        stream_per_shard.extend([i] * len(own))
        per_stream.append(len(own))
    if not allow_unsafe_types:
        for sh, si in zip(shards, stream_per_shard):
            where = f"{streams[si].dirname}: shard {sh.raw_data.basename}"
            check_shard_safe(sh, path=where, allow_unsafe_types=False)
    return DatasetShards(
        shards=shards,
        samples_per_shard=np.array([sh.samples for sh in shards], dtype=np.int64),
        stream_per_shard=np.array(stream_per_shard, dtype=np.int64),
        shards_per_stream=np.array(per_stream, dtype=np.int64),
    )
