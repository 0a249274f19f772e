"""Shard readers: memory-mapped, offset table parsed once, zero-copy sample slices.

The reference reader opens, seeks, reads and closes the shard file for every sample; we map each shard once
per process and turn a sample lookup into two uint32 reads and a slice of the map, which is what brings random
access to a few microseconds. Compressed shards are decompressed either in memory (read-only datasets,
``LocalDataset``) or to their raw name with temp-file + rename (a cache directory, ``decompress_shard``),
piece by piece, so the front of a shard can be read while the rest is still being decoded.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from streaming.format.compression import Compression, get_compression
from streaming.format.encodings import decode_text_value, is_encoding_safe
from streaming.format.index import FileInfo, ShardInfo
from streaming.format.mds import MDSSchema, ShardFormatError, parse_mds_header
from streaming.format.mds_columns import ColumnRead, ColumnSource, mds_column_reader, mds_column_sources
from streaming.util.sizes import SizeLimitExceeded

__all__ = ["FileMap", "ShardReader", "decompress_shard", "open_shard", "read_file_bytes"]

_U32 = struct.Struct("<I")
_tmp_counter = itertools.count()


class FileMap(mmap.mmap):
    """A read-only memory map of a shard file; unlike ``mmap.mmap`` it takes weak references, so its owner can
    learn when the last view of the file (a reader, a sample's memoryview or array) is gone."""


def _map_file(path: str) -> memoryview:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(FileMap(f.fileno(), 0, access=mmap.ACCESS_READ))


def read_file_bytes(
    dirname: str,
    raw: FileInfo,
    zipped: FileInfo | None,
    compression: str | None,
    *,
    files: Mapping[str, memoryview] | None = None,
) -> memoryview:
    """The raw bytes of one shard file: the mapped raw file if present, else the decompressed zip file; from
    ``files`` (the shard's stored files already in memory, by basename) instead of the disk when given."""
    if files is not None:
        if raw.basename in files:
            return files[raw.basename]
        if zipped is not None and compression and zipped.basename in files:
            return _decompress(files[zipped.basename], compression, zipped.basename, raw)
        raise FileNotFoundError(f"shard file {raw.basename} is not among the files read into memory")
    raw_path = os.path.join(dirname, raw.basename)
    if os.path.exists(raw_path):
        return _map_file(raw_path)
    if zipped is not None and compression:
        zip_path = os.path.join(dirname, zipped.basename)
        if os.path.exists(zip_path):
            with open(zip_path, "rb") as f:
                data = f.read()
            return _decompress(data, compression, zip_path, raw)
        raise FileNotFoundError(f"shard file missing: neither {raw_path} nor {zip_path} exists")
    raise FileNotFoundError(f"shard file missing: {raw_path}")


def _decompress(data: bytes | memoryview, compression: str, where: str, raw: FileInfo) -> memoryview:
    try:
        return memoryview(get_compression(compression).decompress(data, max_bytes=raw.bytes))
    except SizeLimitExceeded:
        raise _too_large(where, compression, raw) from None
    except Exception as err:
        # any codec failure means a corrupt file
        raise ShardFormatError(f"{where}: cannot decompress ({compression}): {err}") from None


def decompress_shard(dirname: str, info: ShardInfo, *, on_tmp: Callable[[str], None] | None = None) -> None:
    """Materialize a compressed shard's raw files next to it (temp file + atomic rename; safe to race).

    The raw data file is written front to back as it is decoded; ``on_tmp`` is told its temp name before the
    first byte, so another thread can read what is already there (``streaming.reader.growing_shard``).

    Raises:
        FileNotFoundError: Neither the raw nor the compressed file is present.
        ShardFormatError: The compressed file does not decode, or not to the size index.json records.
    """
    if info.zip_data is None or not info.compression:
        return
    codec = get_compression(info.compression)
    pairs = [(info.raw_data, info.zip_data), (info.raw_meta, info.zip_meta)]
    for raw, zipped in pairs:
        if raw is None or zipped is None:
            continue
        raw_path = os.path.join(dirname, raw.basename)
        if os.path.exists(raw_path):
            continue
        zip_path = os.path.join(dirname, zipped.basename)
        if not os.path.exists(zip_path):
            raise FileNotFoundError(f"shard file missing: neither {raw_path} nor {zip_path} exists")
        tmp = f"{raw_path}.tmp-{os.getpid()}-{next(_tmp_counter)}"
        try:
            with open(zip_path, "rb") as src, open(tmp, "wb") as dst:
                if on_tmp is not None and raw is info.raw_data:
                    on_tmp(tmp)
                size = _decode_into(codec, src, dst, zip_path, raw)
            if size != raw.bytes:
                raise ShardFormatError(
                    f"{zip_path}: decompresses ({info.compression}) to {size} bytes but index.json says "
                    f"{raw.bytes} for {raw.basename} (truncated or corrupt); restore the file or rebuild the "
                    "dataset"
                )
            os.replace(tmp, raw_path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _too_large(zip_path: str, compression: str, raw: FileInfo) -> ShardFormatError:
    return ShardFormatError(
        f"{zip_path}: decompresses ({compression}) to more than the {raw.bytes} bytes index.json declares "
        f"for {raw.basename}; stopped there (a corrupt or hostile file: restore it or rebuild the dataset)"
    )


def _decode_into(codec: Compression, src: BinaryIO, dst: BinaryIO, zip_path: str, raw: FileInfo) -> int:
    """``codec.decompress_file(src, dst)``, stopped past ``raw.bytes``; a codec failure (not a failing disk)
    names the file."""
    try:
        return codec.decompress_file(src, dst, max_bytes=raw.bytes)
    except SizeLimitExceeded:
        raise _too_large(zip_path, codec.spec, raw) from None
    except ImportError:
        # an optional codec package is missing: its message names what to install
        raise
    except OSError as err:
        # the disk, not the data (codecs raise OSError without errno on bad data)
        if err.errno is not None:
            raise
        raise ShardFormatError(f"{zip_path}: cannot decompress ({codec.spec}): {err}") from None
    except Exception as err:
        # any other codec failure means a corrupt file
        raise ShardFormatError(f"{zip_path}: cannot decompress ({codec.spec}): {err}") from None


class ShardReader:
    """Random access to the samples of one shard.

    ``reader[i]`` returns a dict of column values; ``reader.sample_bytes(i)`` the raw sample bytes (a
    zero-copy memoryview for MDS); ``reader.read_columns(indices, columns)`` some columns of many samples
    (MDS: fixed-size ndarray columns as one array, ``streaming.format.mds_columns``). Iteration yields samples
    in order.
    """

    def __init__(
        self,
        *,
        path: str,
        num_samples: int,
        slice_fn: Callable[[int], memoryview],
        decode: Callable[[memoryview], dict[str, Any]],
        column_read: ColumnRead | None = None,
        column_sources: dict[str, ColumnSource] | None = None,
        column_names: Sequence[str] | None = None,
        buffers: Sequence[memoryview] = (),
    ) -> None:
        self.path = path
        self.buffers = tuple(buffers)
        """The bytes behind the samples (each a ``FileMap`` of a shard file, or memory); samples' memoryviews
        and arrays are views of them."""
        self._n = num_samples
        self._slice = slice_fn
        self._decode = decode
        self._column_read = column_read
        self.column_sources: dict[str, ColumnSource] = column_sources or {}
        """Columns a batch can gather straight from the shard (``streaming.format.mds_columns``)."""
        self.column_names = None if column_names is None else frozenset(column_names)
        """The shard's columns (None: not known without reading a sample, e.g. JSON lines)."""

    def read_columns(self, indices: np.ndarray, columns: Sequence[str]) -> dict[str, Any]:
        """``columns`` of the samples at in-shard ``indices`` (int64): ``{name: (B, ...) array or a list of B
        values}``, equal to the per-sample values; columns the shard (or a JSON row) lacks are left out."""
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= self._n):
            bad = int(indices.max()) if int(indices.min()) >= 0 else int(indices.min())
            raise IndexError(f"{self.path}: sample {bad} out of range [0, {self._n})")
        if self._column_read is not None:
            out = self._column_read(indices, columns)
            if out is not None:
                return out
        # JSON lines: rows may differ in keys
        rows = [self[i] for i in indices.tolist()]
        return {c: [r[c] for r in rows] for c in columns if rows and all(c in r for r in rows)}

    def __len__(self) -> int:
        return self._n

    def sample_bytes(self, index: int) -> memoryview:
        if not 0 <= index < self._n:
            raise IndexError(f"{self.path}: sample {index} out of range [0, {self._n})")
        return self._slice(index)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self._n:
            raise IndexError(f"{self.path}: sample {index} out of range [0, {self._n})")
        try:
            return self._decode(self._slice(index))
        except ShardFormatError as err:
            raise ShardFormatError(f"{self.path} sample {index}: {err}") from None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self._n):
            yield self._decode(self._slice(i))


def check_shard_safe(info: ShardInfo, *, path: str, allow_unsafe_types: bool) -> None:
    """Raises ValueError naming `path` and the column if the shard has an unsafe (`pkl`) column."""
    if allow_unsafe_types:
        return
    for name, enc in zip(info.column_names, info.column_encodings):
        if not is_encoding_safe(enc):
            raise ValueError(
                f"{path} contains an unsafe type: column {name!r} uses the unsafe encoding {enc!r} (pickle "
                "can run arbitrary code); pass allow_unsafe_types=True only if you trust this dataset"
            )


def _mds_reader(dirname: str, info: ShardInfo, files: Mapping[str, memoryview] | None) -> ShardReader:
    path = os.path.join(dirname, info.raw_data.basename)
    buf = read_file_bytes(dirname, info.raw_data, info.zip_data, info.compression, files=files)
    n, offsets, _ = parse_mds_header(buf, path=path, expected_samples=info.samples)
    schema = MDSSchema.from_config(info.config, source=path)
    decode = schema.decoder()

    def slice_fn(i: int) -> memoryview:
        return buf[offsets[i] : offsets[i + 1]]

    sources = mds_column_sources(buf, offsets, schema)
    return ShardReader(
        path=path,
        num_samples=n,
        slice_fn=slice_fn,
        decode=decode,
        column_read=mds_column_reader(buf, offsets, schema, sources),
        column_sources=sources,
        column_names=schema.names,
        buffers=(buf,),
    )


def _meta_offsets(meta: memoryview, *, path: str, samples: int, data_size: int) -> memoryview:
    if len(meta) < 4:
        raise ShardFormatError(f"{path}: truncated meta file ({len(meta)} bytes)")
    (n,) = _U32.unpack_from(meta, 0)
    if n != samples:
        raise ShardFormatError(f"{path}: meta says {n} samples but index.json says {samples}")
    end = 4 + 4 * (n + 1)
    if end > len(meta):
        raise ShardFormatError(
            f"{path}: truncated meta file: offset table needs {end} bytes, has {len(meta)}"
        )
    offsets = meta[4:end].cast("I")
    if offsets[n] != data_size:
        raise ShardFormatError(
            f"{path}: meta offsets end at {offsets[n]} but the data file has {data_size} bytes (truncated?)"
        )
    return offsets


def _split_reader(dirname: str, info: ShardInfo, files: Mapping[str, memoryview] | None) -> ShardReader:
    path = os.path.join(dirname, info.raw_data.basename)
    assert info.raw_meta is not None
    data = read_file_bytes(dirname, info.raw_data, info.zip_data, info.compression, files=files)
    meta = read_file_bytes(dirname, info.raw_meta, info.zip_meta, info.compression, files=files)
    offsets = _meta_offsets(meta, path=path + ".meta", samples=info.samples, data_size=len(data))
    newline = info.config["newline"]
    nl = len(newline.encode("utf-8"))

    def slice_fn(i: int) -> memoryview:
        return data[offsets[i] : offsets[i + 1]]

    if info.format == "json":

        def decode_json(raw: memoryview) -> dict[str, Any]:
            try:
                return json.loads(bytes(raw))
            except json.JSONDecodeError as err:
                raise ShardFormatError(f"corrupt JSON line: {err}") from None

        decode: Callable[[memoryview], dict[str, Any]] = decode_json
    else:
        sep = {"csv": ",", "tsv": "\t"}.get(info.format) or info.config["separator"]
        names, encs = info.column_names, info.column_encodings

        def decode(raw: memoryview) -> dict[str, Any]:
            text = bytes(raw[: len(raw) - nl]).decode("utf-8")
            values = text.split(sep)
            if len(values) != len(names):
                raise ShardFormatError(
                    f"line has {len(values)} fields, expected {len(names)} ({', '.join(names)})"
                )
            return {n: decode_text_value(e, v) for n, e, v in zip(names, encs, values)}

    return ShardReader(
        path=path, num_samples=info.samples, slice_fn=slice_fn, decode=decode, buffers=(data, meta)
    )


def open_shard(
    dirname: str,
    info: ShardInfo,
    *,
    allow_unsafe_types: bool = False,
    files: Mapping[str, memoryview] | None = None,
) -> ShardReader:
    """Open one shard of a local dataset directory for reading.

    Args:
        dirname: The directory holding ``index.json`` (shard basenames are relative to it).
        info: The shard's index entry.
        allow_unsafe_types: Allow ``pkl`` columns (pickle can execute code on load).
        files: The shard's stored files (raw or compressed) already in memory, by basename: read from them,
            not from ``dirname`` (a shard read without keeping it on disk, ``streaming.cache``).

    Raises:
        FileNotFoundError: If neither the raw nor the compressed shard file exists.
        ShardFormatError: If the file is truncated, corrupt, or disagrees with the index.
        ValueError: If the shard has ``pkl`` columns and ``allow_unsafe_types`` is False.
    """
    path = os.path.join(dirname, info.raw_data.basename)
    check_shard_safe(info, path=path, allow_unsafe_types=allow_unsafe_types)
    if info.format == "mds":
        return _mds_reader(dirname, info, files)
    return _split_reader(dirname, info, files)
