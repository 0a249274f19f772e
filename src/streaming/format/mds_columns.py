"""Reading some columns of many MDS samples at once: fixed-size ndarray columns gathered into one array.

Design note: a worker collating a token batch needs one column (``tokens``) of B samples as a (B, ...) array;
decoding each sample into a dict of every column (an ``id`` int included) and stacking the rows afterwards
costs more than the bytes it moves. A column is *gathered* when its encoding is an ndarray of fixed dtype and
shape and every column before it (columns are stored in sorted-name order) has a fixed size, so it starts at
the same offset of every sample (a ``ColumnSource``): its rows are copied straight from the mapped shards into
the batch array, one memoryview slice copy per sample (``gather``; a batch of a shuffled epoch touches a
dozen shards or more, so the per-sample loop spans shards: per-shard numpy calls cost more than they save).
Other requested columns are decoded per sample, skipping the columns nobody asked for. The result equals
the per-sample decode bit for bit (same dtype, shape and values); when a sample's length does not fit the
schema the read falls back to the per-sample path, which raises its usual error naming the shard and sample.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streaming.format.encodings import get_encoding
from streaming.format.mds import MDSSchema

__all__ = ["ColumnRead", "ColumnSource", "gather", "mds_column_reader", "mds_column_sources"]

ColumnRead = Callable[[np.ndarray, Sequence[str]], "dict[str, Any] | None"]
"""``(in-shard indices, column names) -> {name: (B, ...) array, or a list of B decoded values}``; columns the
shard lacks are left out; None when a sample does not fit the schema (the caller decodes per sample)."""


@dataclass(frozen=True, eq=False)
class ColumnSource:
    """Where one gatherable column lies in one shard: ``buf`` the shard bytes, ``offsets`` its uint32 offset
    table; the column's ``offset`` and ``size`` inside a sample; ``sample_size`` every sample's size when the
    schema is all fixed-size (else a sample must just hold the column)."""

    buf: memoryview
    offsets: memoryview
    offset: int
    size: int
    dtype: np.dtype
    shape: tuple[int, ...]
    sample_size: int | None


def mds_column_sources(buf: memoryview, offsets: memoryview, schema: MDSSchema) -> dict[str, ColumnSource]:
    """The gatherable columns of one MDS shard (see the module note)."""
    sources: dict[str, ColumnSource] = {}
    num_var = sum(1 for s in schema.sizes if s is None)
    fixed = None if num_var else sum(s for s in schema.sizes if s is not None)
    pos = 4 * num_var
    for name, enc, size in zip(schema.names, schema.encodings, schema.sizes):
        if size is None:
            # later columns start at a per-sample offset
            break
        encoding = get_encoding(enc)
        dtype, shape = getattr(encoding, "dtype", None), getattr(encoding, "shape", None)
        if enc.startswith("ndarray") and dtype is not None and shape is not None:
            sources[name] = ColumnSource(buf, offsets, pos, size, dtype, tuple(shape), fixed)
        pos += size
    return sources


def gather(sources: Sequence[ColumnSource], indices: Sequence[int]) -> np.ndarray | None:
    """(B, *shape) rows: sample ``indices[k]`` of ``sources[k]``'s shard (sources of one dtype and shape);
    None when a sample's size does not fit its schema."""
    first = sources[0]
    size, n = first.size, len(indices)
    out = np.empty((n, size), dtype=np.uint8)
    dst = out.data.cast("B")
    pos = 0
    for src, i in zip(sources, indices):
        offsets = src.offsets
        start, end = offsets[i], offsets[i + 1]
        if end - start != src.sample_size if src.sample_size is not None else end - start < src.offset + size:
            return None
        begin = start + src.offset
        dst[pos : pos + size] = src.buf[begin : begin + size]
        pos += size
    return out.view(first.dtype).reshape(n, *first.shape)


def _partial_decoder(schema: MDSSchema, wanted: set[str]) -> Callable[[memoryview], dict[str, Any]]:
    """Decodes only the ``wanted`` columns of one sample (positions from its variable-length header)."""
    decoders = [get_encoding(e).decode for e in schema.encodings]
    num_var = sum(1 for s in schema.sizes if s is None)
    lengths = struct.Struct(f"<{num_var}I")
    plan = list(zip(schema.names, decoders, schema.sizes))

    def decode(data: memoryview) -> dict[str, Any]:
        var = iter(lengths.unpack_from(data, 0))
        pos = lengths.size
        out: dict[str, Any] = {}
        for name, dec, size in plan:
            end = pos + (size if size is not None else next(var))
            if name in wanted:
                out[name] = dec(data[pos:end])
            pos = end
        return out

    return decode


def mds_column_reader(
    buf: memoryview, offsets: memoryview, schema: MDSSchema, sources: dict[str, ColumnSource]
) -> ColumnRead:
    """The ``ColumnRead`` of one MDS shard: ``buf`` the shard bytes, ``offsets`` its uint32 offset table,
    ``sources`` its gatherable columns."""
    partial: dict[frozenset[str], Callable[[memoryview], dict[str, Any]]] = {}

    def read(indices: np.ndarray, columns: Sequence[str]) -> dict[str, Any] | None:
        names = [c for c in columns if c in schema.names]
        picks = indices.tolist()
        out: dict[str, Any] = {}
        for c in names:
            if c in sources:
                rows = gather([sources[c]] * len(picks), picks)
                if rows is None:
                    # the per-sample decoder raises its usual error for the corrupt sample
                    return None
                out[c] = rows
        rest = frozenset(c for c in names if c not in sources)
        if rest:
            dec = partial.get(rest) or partial.setdefault(rest, _partial_decoder(schema, set(rest)))
            decoded = [dec(buf[offsets[i] : offsets[i + 1]]) for i in picks]
            out.update({c: [r[c] for r in decoded] for c in rest})
        # in the order asked for
        return {c: out[c] for c in names}

    return read
