"""Dataset checks and repair: ``describe``, ``validate`` and ``rebuild_index``
(behind ``python -m streaming``).

Validation trusts nothing: every file listed by the index must exist with the recorded size and digests,
every offset table must be monotonic and end at the file size, and every sample count must agree between the
index and the shard. Rebuilding reads the writer config that each MDS shard embeds (and each ``.meta`` file
carries), which is exactly why the format stores it.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from streaming.format.compression import get_compression
from streaming.format.hashing import hash_bytes
from streaming.format.index import INDEX_FILENAME, DatasetIndex, FileInfo, ShardInfo, load_index, write_index
from streaming.format.mds import ShardFormatError, parse_mds_header
from streaming.format.reader import open_shard, read_file_bytes

__all__ = ["Problem", "describe_dataset", "is_shard_file", "rebuild_index", "validate_dataset"]

_U32 = struct.Struct("<I")
_SHARD_RE = re.compile(r"^shard\.(\d+)\.(mds|json|csv|tsv|xsv)(?:\.(zstd|gz|bz2|br|snappy))?$")
_META_RE = re.compile(r"^shard\.(\d+)\.(json|csv|tsv|xsv)\.meta(?:\.(zstd|gz|bz2|br|snappy))?$")


def is_shard_file(name: str) -> bool:
    """True for the plain file names ``rebuild_index`` reads: ``shard.NNNNN.<format>[.meta][.<compression>]``.

    Names found by listing a folder or a bucket are untrusted; only names of this exact shape (no separator,
    no ``..``) are ever joined onto a local folder by ``rebuild-index``.
    """
    return bool(_SHARD_RE.match(name) or _META_RE.match(name))


@dataclass(frozen=True)
class Problem:
    """One validation failure: which shard (index position), which file, and why."""

    shard: int
    path: str
    reason: str

    def __str__(self) -> str:
        return f"shard {self.shard} ({self.path}): {self.reason}"


def describe_dataset(dirname: str, split: str | None = None) -> dict[str, Any]:
    """Summary of a dataset: shards, samples, columns and encodings, compression, raw/stored bytes."""
    index = load_index(dirname, split)
    shards = index.shards
    schemas = {tuple(zip(s.column_names, s.column_encodings)) for s in shards}
    return {
        "path": index.path,
        "shards": len(shards),
        "samples": index.num_samples,
        "formats": sorted({s.format for s in shards}),
        "columns": [dict(schema) for schema in sorted(schemas)],
        "compression": sorted({s.compression or "none" for s in shards}),
        "hashes": sorted({h for s in shards for h in s.hashes}),
        "raw_bytes": sum(s.raw_data.bytes + (s.raw_meta.bytes if s.raw_meta else 0) for s in shards),
        "stored_bytes": sum(f.bytes for s in shards for f in s.stored_files()),
        "samples_per_shard": {
            "min": min((s.samples for s in shards), default=0),
            "max": max((s.samples for s in shards), default=0),
        },
    }


def _check_file(dirname: str, info: FileInfo) -> tuple[bytes | None, str | None]:
    path = os.path.join(dirname, info.basename)
    if not os.path.exists(path):
        return None, "file is missing"
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != info.bytes:
        return data, f"size is {len(data)} bytes but index.json records {info.bytes}"
    for algo, digest in info.hashes.items():
        actual = hash_bytes(algo, data)
        if actual != digest:
            return data, f"{algo} digest {actual} does not match index.json ({digest})"
    return data, None


def _check_offsets(offsets: memoryview, *, start: int, size: int) -> str | None:
    arr = np.frombuffer(offsets, dtype="<u4")
    if arr[0] < start or arr[-1] != size:
        return f"offset table spans [{arr[0]}, {arr[-1]}) but the data is {size} bytes"
    if np.any(np.diff(arr.astype(np.int64)) < 0):
        bad = int(np.argmax(np.diff(arr.astype(np.int64)) < 0))
        return f"offset table is not monotonic at sample {bad}"
    return None


def _validate_shard(dirname: str, number: int, shard: ShardInfo, *, decode: bool) -> list[Problem]:
    problems = []
    for info in shard.stored_files():
        _, reason = _check_file(dirname, info)
        if reason:
            problems.append(Problem(number, info.basename, reason))
    if problems:
        return problems
    path = shard.raw_data.basename
    try:
        data = read_file_bytes(dirname, shard.raw_data, shard.zip_data, shard.compression)
        if shard.zip_data is not None and len(data) != shard.raw_data.bytes:
            return [
                Problem(
                    number, path, f"decompresses to {len(data)} bytes, index.json says {shard.raw_data.bytes}"
                )
            ]
        if shard.format == "mds":
            n, offsets, config = parse_mds_header(data, path=path, expected_samples=shard.samples)
            if config != shard.config:
                return [Problem(number, path, "embedded config differs from the index.json entry")]
            reason = _check_offsets(
                offsets, start=4 + 4 * (n + 1) + len(json.dumps(config, sort_keys=True)), size=len(data)
            )
        else:
            assert shard.raw_meta is not None
            meta = read_file_bytes(dirname, shard.raw_meta, shard.zip_meta, shard.compression)
            (n,) = _U32.unpack_from(meta, 0)
            if n != shard.samples:
                return [Problem(number, path, f"meta says {n} samples but index.json says {shard.samples}")]
            reason = _check_offsets(meta[4 : 4 + 4 * (n + 1)], start=0, size=len(data))
        if reason:
            return [Problem(number, path, reason)]
        if decode:
            reader = open_shard(dirname, shard, allow_unsafe_types=True)
            for i in range(len(reader)):
                reader[i]
    except (ShardFormatError, ValueError, IndexError, struct.error) as err:
        return [Problem(number, path, str(err))]
    return []


def validate_dataset(dirname: str, split: str | None = None, *, decode: bool = False) -> list[Problem]:
    """Check every shard of a dataset; an empty list means it is intact.

    Args:
        dirname: Dataset directory.
        split: Optional split sub-directory.
        decode: Also decode every sample (slower; catches corrupt values inside intact framing).
    """
    index = load_index(dirname, split)
    problems = []
    for number, shard in enumerate(index.shards):
        problems.extend(_validate_shard(index.dirname, number, shard, decode=decode))
    return problems


def _file_info(basename: str, data: bytes | memoryview, hashes: list[str]) -> FileInfo:
    return FileInfo(basename=basename, bytes=len(data), hashes={a: hash_bytes(a, data) for a in hashes})


def _rebuild_one(dirname: str, raw_name: str, fmt: str, ext: str | None) -> ShardInfo:
    stored = raw_name + (f".{ext}" if ext else "")
    with open(os.path.join(dirname, stored), "rb") as f:
        stored_bytes = f.read()
    codec = get_compression(ext) if ext else None
    raw = codec.decompress(stored_bytes) if codec else stored_bytes
    if fmt == "mds":
        n, _, config = parse_mds_header(raw, path=stored)
        meta_pair: tuple[FileInfo | None, FileInfo | None] = (None, None)
    else:
        meta_stored = raw_name + ".meta" + (f".{ext}" if ext else "")
        with open(os.path.join(dirname, meta_stored), "rb") as f:
            meta_bytes = f.read()
        meta = codec.decompress(meta_bytes) if codec else meta_bytes
        (n,) = _U32.unpack_from(meta, 0)
        config = json.loads(bytes(meta[4 + 4 * (n + 1) :]).decode("utf-8"))
        hashes = list(config.get("hashes") or [])
        meta_pair = (
            _file_info(raw_name + ".meta", meta, hashes),
            _file_info(meta_stored, meta_bytes, hashes) if codec else None,
        )
    hashes = list(config.get("hashes") or [])
    return ShardInfo(
        format=fmt,
        samples=n,
        raw_data=_file_info(raw_name, raw, hashes),
        zip_data=_file_info(stored, stored_bytes, hashes) if codec else None,
        config=config,
        raw_meta=meta_pair[0],
        zip_meta=meta_pair[1],
    )


def rebuild_index(dirname: str, *, overwrite: bool = False) -> DatasetIndex:
    """Recreate ``dirname/index.json`` from the shards' embedded configs (shards in numeric order).

    Raises:
        FileExistsError: If an index exists and ``overwrite`` is False.
        FileNotFoundError: If the directory holds no shard files.
    """
    target = os.path.join(dirname, INDEX_FILENAME)
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target} exists; pass --force (overwrite=True) to replace it")
    found: dict[int, dict[str, str | None]] = {}
    for name in os.listdir(dirname):
        match = _SHARD_RE.match(name)
        if match is None:
            continue
        entry = found.setdefault(
            int(match.group(1)),
            {"raw": f"shard.{match.group(1)}.{match.group(2)}", "fmt": match.group(2), "ext": None},
        )
        if match.group(3):
            entry["ext"] = match.group(3)
    if not found:
        raise FileNotFoundError(f"no shard files (shard.NNNNN.<format>[.<compression>]) in {dirname}")
    shards = [
        _rebuild_one(dirname, found[k]["raw"], found[k]["fmt"], found[k]["ext"])  # type: ignore[arg-type]
        for k in sorted(found)
    ]
    index = DatasetIndex(path=target, shards=shards)
    write_index(index, target)
    return index
