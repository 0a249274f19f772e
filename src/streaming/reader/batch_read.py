"""A worker's batch read path: the batch's samples as columns, read shard by shard, not sample by sample.

Design note: opt-in by the collate function: a ``SplitCollator`` whose ``columns`` names the sample keys its
``pack`` reads gets a ``ColumnBatch`` instead of a list of sample dicts. The worker's iteration then yields
``SampleRef`` s (an open shard reader and an in-shard index: nothing decoded; the reader object keeps its map
alive even after the shard access releases it), and ``read_batch`` groups a batch's refs by shard, asks each
reader for just those columns (``ShardReader.read_columns``: fixed-size ndarray columns gathered straight into
one array), and puts the rows back in batch order. A ``ColumnBatch`` is still a sequence of sample dicts
(with only the requested columns and the stream tag), so a collator may use either view; the values are the
per-sample path's, bit for bit. The iteration order, and so resumption and per-stream accounting, is the
dataset's own: only how a batch's samples are read changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from streaming.format.mds_columns import gather
from streaming.format.reader import ShardReader

__all__ = ["MISSING", "ColumnBatch", "SampleRef", "read_batch"]

MISSING: Any = object()
"""The value of a column at a sample whose shard lacks it (a mixture of streams): its dict omits the key."""


class SampleRef:
    """One sample of an iteration, not yet read: ``reader`` and in-shard ``index``, or an already decoded
    ``sample`` (the iteration's first sample may be read from a shard still being written); ``stream`` is the
    stream index when the dataset tags samples with it."""

    __slots__ = ("index", "reader", "sample", "stream")

    def __init__(
        self,
        reader: ShardReader | None,
        index: int,
        sample: dict[str, Any] | None = None,
        stream: int | None = None,
    ) -> None:
        self.reader, self.index, self.sample, self.stream = reader, index, sample, stream


class ColumnBatch(Sequence[dict[str, Any]]):
    """The samples of one batch as columns: ``columns[name]`` a (B, ...) array or a list of B values;
    ``streams`` (B,) int64 stream indices under the key ``tag`` (None: untagged). Indexing and iteration give
    per-sample dicts of the same values."""

    def __init__(
        self, columns: dict[str, Any], size: int, tag: str | None, streams: np.ndarray | None
    ) -> None:
        self.columns, self.size, self.tag, self.streams = columns, size, tag, streams

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        if not -self.size <= i < self.size:
            raise IndexError(f"sample {i} of a batch of {self.size}")
        sample = {name: values[i] for name, values in self.columns.items()}
        if any(v is MISSING for v in sample.values()):
            sample = {k: v for k, v in sample.items() if v is not MISSING}
        if self.tag is not None and self.streams is not None:
            sample[self.tag] = int(self.streams[i])
        return sample

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(self.size))


def read_batch(refs: Sequence[SampleRef], columns: Sequence[str], tag: str | None) -> ColumnBatch:
    """The ``columns`` of ``refs`` (one batch, in order) as a ``ColumnBatch`` (see the module note); every
    column when the batch's shards have none of them (so a collator's error can name what is there).

    A column gathered in every shard of the batch (one dtype and shape) is one array; any other column is a
    list of per-sample values; a batch holding an already decoded sample or a JSON-lines sample (rows may
    differ in keys) is read per sample."""
    n = len(refs)
    streams = None
    if tag is not None and n and refs[0].stream is not None:
        streams = np.fromiter((r.stream for r in refs), dtype=np.int64, count=n)
    # decoded, or JSON rows
    if any(r.reader is None or r.reader.column_names is None for r in refs):
        return _per_sample(refs, columns, tag, streams)
    out: dict[str, Any] = {}
    rest = []
    for name in columns:
        rows = _gathered(refs, name)
        if rows is not None:
            out[name] = rows
        else:
            rest.append(name)
    readers = {id(r.reader): r.reader for r in refs if r.reader is not None}.values()
    rest = [c for c in rest if any(r.column_names is not None and c in r.column_names for r in readers)]
    if rest:
        groups: dict[int, tuple[ShardReader, list[int]]] = {}
        for pos, ref in enumerate(refs):
            assert ref.reader is not None
            groups.setdefault(id(ref.reader), (ref.reader, []))[1].append(pos)
        parts = []
        for reader, positions in groups.values():
            local = np.fromiter((refs[p].index for p in positions), dtype=np.int64, count=len(positions))
            parts.append((np.asarray(positions, dtype=np.int64), reader.read_columns(local, rest)))
        out.update(_merge(parts, n))
    if not out and n:
        return _per_sample(refs, (), tag, streams)
    return ColumnBatch({c: out[c] for c in columns if c in out}, n, tag, streams)


def _gathered(refs: Sequence[SampleRef], name: str) -> np.ndarray | None:
    """Column ``name`` of every ref as one array, when every ref's shard can gather it (None otherwise)."""
    sources = []
    for ref in refs:
        assert ref.reader is not None
        src = ref.reader.column_sources.get(name)
        if src is None:
            return None
        sources.append(src)
    first = sources[0]
    for src in set(sources):
        if src.dtype != first.dtype or src.shape != first.shape:
            return None
    return gather(sources, [r.index for r in refs])


def _per_sample(
    refs: Sequence[SampleRef], columns: Sequence[str], tag: str | None, streams: np.ndarray | None
) -> ColumnBatch:
    rows: list[dict[str, Any]] = [r.reader[r.index] if r.reader is not None else r.sample or {} for r in refs]
    present = {c for row in rows for c in row}
    wanted = [c for c in columns if c in present] or (list(rows[0]) if rows else [])
    return ColumnBatch({c: [row.get(c, MISSING) for row in rows] for c in wanted}, len(refs), tag, streams)


def _merge(parts: list[tuple[np.ndarray, dict[str, Any]]], n: int) -> dict[str, Any]:
    """Per-shard column reads -> one column each, rows at their batch positions (a column some shard lacks
    is ``MISSING`` at its rows)."""
    if len(parts) == 1 and np.array_equal(parts[0][0], np.arange(n)):
        return parts[0][1]
    names = list(dict.fromkeys(name for _, cols in parts for name in cols))
    out: dict[str, Any] = {}
    for name in names:
        values: list[Any] = [cols.get(name) for _, cols in parts]
        first: Any = values[0]
        if all(
            isinstance(v, np.ndarray) and v.dtype == first.dtype and v.shape[1:] == first.shape[1:]
            for v in values
        ):
            merged = np.empty((n, *first.shape[1:]), dtype=first.dtype)
            for (positions, _), v in zip(parts, values):
                merged[positions] = v
            out[name] = merged
        else:
            rows: list[Any] = [MISSING] * n
            for (positions, _), v in zip(parts, values):
                if v is not None:
                    for p, value in zip(positions.tolist(), v):
                        rows[p] = value
            out[name] = rows
    return out
