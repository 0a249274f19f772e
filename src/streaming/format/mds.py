"""MDS shard layout: the per-sample column packing and the shard header (spec: streaming.md §2.3).

A shard is ``uint32 N``, ``uint32 offsets[N+1]`` (absolute, little-endian), the writer config as JSON, then
the samples back to back. A sample is the ``uint32`` lengths of its variable-size columns followed by every
column's bytes, in sorted column-name order. Encoders and decoders are compiled once per schema so the hot
path is a ``struct.unpack_from`` plus one decode call per column, on zero-copy ``memoryview`` slices.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stackbase.bounded import NotJSON, TooLarge, parse_json
from streaming.format.encodings import EncodingError, encode_value, get_encoding

__all__ = [
    "MAX_SHARD_BYTES",
    "MDSSchema",
    "ShardFormatError",
    "build_mds_shard",
    "mds_config",
    "parse_mds_header",
]

MAX_SHARD_BYTES = (1 << 32) - 1
"""Offsets are uint32: a raw MDS shard must be smaller than 4 GiB."""

_U32 = struct.Struct("<I")


class ShardFormatError(ValueError):
    """A shard file that does not match its format (truncated, corrupt, or inconsistent with the index)."""


@dataclass(frozen=True)
class MDSSchema:
    """Column names (sorted), their encodings and fixed sizes, with compiled encode/decode paths."""

    names: tuple[str, ...]
    encodings: tuple[str, ...]
    sizes: tuple[int | None, ...]

    @classmethod
    def from_columns(cls, columns: Mapping[str, str]) -> MDSSchema:
        """Build from a ``{name: encoding}`` mapping (validated; names sorted as the format requires)."""
        if not columns:
            raise ValueError("columns must name at least one column, e.g. {'tokens': 'ndarray:int32'}")
        names = tuple(sorted(columns))
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"column names must be non-empty strings, got {name!r}")
        encodings = tuple(columns[n] for n in names)
        sizes = tuple(get_encoding(e).size for e in encodings)
        return cls(names=names, encodings=encodings, sizes=sizes)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, source: str = "shard config") -> MDSSchema:
        """Build from a shard config (``column_names``/``column_encodings``/``column_sizes``); ``source`` (the
        shard's path) names it in errors."""
        names, encodings = tuple(config["column_names"]), tuple(config["column_encodings"])
        sizes = tuple(get_encoding(e).size for e in encodings)
        declared = tuple(config.get("column_sizes") or sizes)
        if declared != sizes:
            raise ShardFormatError(
                f"{source}: column_sizes {list(declared)} do not match encodings {list(encodings)}"
            )
        return cls(names=names, encodings=encodings, sizes=sizes)

    @property
    def columns(self) -> dict[str, str]:
        return dict(zip(self.names, self.encodings))

    def encoder(self) -> Callable[[Mapping[str, Any]], bytes]:
        """A function encoding one sample dict into MDS sample bytes."""
        encs = [get_encoding(e) for e in self.encodings]
        names, sizes = self.names, self.sizes
        var_index = [i for i, s in enumerate(sizes) if s is None]
        lengths = struct.Struct(f"<{len(var_index)}I")

        def encode(sample: Mapping[str, Any]) -> bytes:
            parts: list[bytes] = []
            for name, enc in zip(names, encs):
                if name not in sample:
                    raise EncodingError(f"sample is missing column {name!r} (columns: {', '.join(names)})")
                try:
                    parts.append(encode_value(enc, sample[name]))
                except EncodingError as err:
                    raise EncodingError(f"column {name!r} ({enc.name}): {err}") from None
                except (TypeError, ValueError, OverflowError) as err:
                    raise EncodingError(
                        f"column {name!r} ({enc.name}): cannot encode {sample[name]!r}: {err}"
                    ) from None
            head = lengths.pack(*(len(parts[i]) for i in var_index)) if var_index else b""
            return head + b"".join(parts)

        return encode

    def decoder(self) -> Callable[[memoryview], dict[str, Any]]:
        """A function decoding MDS sample bytes (a memoryview slice) into a dict of column values."""
        decoders = [get_encoding(e).decode for e in self.encodings]
        names, sizes = self.names, self.sizes
        num_var = sum(1 for s in sizes if s is None)
        lengths = struct.Struct(f"<{num_var}I")
        head = lengths.size

        if num_var == 0:
            spans = []
            pos = 0
            for size in sizes:
                spans.append((pos, pos + size))  # type: ignore[operator]
                pos += size  # type: ignore[operator]

            def decode_fixed(data: memoryview) -> dict[str, Any]:
                return {n: d(data[a:b]) for n, d, (a, b) in zip(names, decoders, spans)}

            return decode_fixed

        def decode(data: memoryview) -> dict[str, Any]:
            var = iter(lengths.unpack_from(data, 0))
            pos = head
            out: dict[str, Any] = {}
            for name, dec, size in zip(names, decoders, sizes):
                end = pos + (size if size is not None else next(var))
                out[name] = dec(data[pos:end])
                pos = end
            if pos != len(data):
                raise ShardFormatError(f"sample is {len(data)} bytes but its columns account for {pos}")
            return out

        return decode


def mds_config(
    *, schema: MDSSchema, compression: str | None, hashes: Sequence[str], size_limit: int | None
) -> dict[str, Any]:
    """The writer config embedded in every MDS shard and repeated in its index entry."""
    return {
        "column_encodings": list(schema.encodings),
        "column_names": list(schema.names),
        "column_sizes": list(schema.sizes),
        "compression": compression,
        "format": "mds",
        "hashes": list(hashes),
        "size_limit": size_limit,
        "version": 2,
    }


def build_mds_shard(config: Mapping[str, Any], samples: Sequence[bytes]) -> bytes:
    """Assemble a whole MDS shard from its config and encoded samples.

    Raises:
        ValueError: If the shard would reach 4 GiB (its uint32 offsets would wrap around).
    """
    config_bytes = json.dumps(config, sort_keys=True).encode("utf-8")
    n = len(samples)
    start = 4 + 4 * (n + 1) + len(config_bytes)
    import numpy as np

    sizes = np.fromiter((len(s) for s in samples), dtype=np.int64, count=n)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = start
    np.cumsum(sizes, out=offsets[1:])
    offsets[1:] += start
    if offsets[-1] > MAX_SHARD_BYTES:
        raise ValueError(
            f"an MDS shard of {int(offsets[-1])} bytes would exceed the 4 GiB limit of its uint32 offsets: "
            "set size_limit below 4gb (e.g. '64mb') so samples are spread over several shards"
        )
    return b"".join([_U32.pack(n), offsets.astype("<u4").tobytes(), config_bytes, *samples])


def parse_mds_header(
    buf: memoryview | bytes, *, path: str, expected_samples: int | None = None
) -> tuple[int, memoryview, dict[str, Any]]:
    """Parse and sanity-check an MDS shard header.

    Returns:
        ``(num_samples, offsets, config)`` where ``offsets`` is a uint32 memoryview of length N+1.

    Raises:
        ShardFormatError: On a truncated or inconsistent shard, naming ``path``.
    """
    view = memoryview(buf)
    size = len(view)
    if size < 8:
        raise ShardFormatError(f"{path}: truncated MDS shard ({size} bytes, header needs at least 8)")
    (n,) = _U32.unpack_from(view, 0)
    if expected_samples is not None and n != expected_samples:
        raise ShardFormatError(
            f"{path}: shard header says {n} samples but index.json says {expected_samples}"
        )
    table_end = 4 + 4 * (n + 1)
    if table_end > size:
        raise ShardFormatError(
            f"{path}: truncated MDS shard: offset table needs {table_end} bytes, file has {size}"
        )
    offsets = view[4:table_end].cast("I")
    first, last = offsets[0], offsets[n]
    if first < table_end or last != size:
        reason = "truncated" if last > size else "corrupt"
        raise ShardFormatError(
            f"{path}: {reason} MDS shard: offsets span [{first}, {last}) but the file has {size} bytes"
        )
    try:
        config = parse_json(bytes(view[table_end:first]), source="config")
    except (NotJSON, TooLarge) as err:
        reason = str(err).removeprefix("config: ")
        raise ShardFormatError(f"{path}: corrupt MDS shard: embedded config is not JSON ({reason})") from None
    return n, offsets, config
