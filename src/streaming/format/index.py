"""``index.json`` v2: the dataset index, validated strictly so that what we write mosaicml-streaming reads.

The upstream reader passes each shard object to its reader class as keyword arguments, so a shard object must
carry *exactly* the key set of its format (spec: streaming.md §2.2). We therefore model shards as typed
dataclasses, refuse unknown or missing keys with the file and shard index in the message, and serialize with
``sort_keys=True`` and Python's default separators to reproduce the reference writer byte for byte.
The per-shard "config" (the shard object minus its per-file fields) is also what MDS shards embed and what
``.meta`` files carry, which is what makes ``rebuild-index`` possible.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from stackbase.bounded import NotJSON, TooLarge, parse_json, read_capped
from streaming.format.compression import is_valid_compression
from streaming.util.safepath import UnsafePathError, safe_relpath

__all__ = [
    "INDEX_FILENAME",
    "INDEX_VERSION",
    "DatasetIndex",
    "FileInfo",
    "IndexError_",
    "IndexJSONError",
    "IndexNotFoundError",
    "ShardInfo",
    "dump_index",
    "index_path",
    "load_index",
    "parse_index",
    "write_index",
]

INDEX_FILENAME = "index.json"
MAX_SHARD_SAMPLES = 2**32 - 1
"""Samples in one shard: MDS headers and split-format meta files count them in uint32."""
MAX_FILE_BYTES = 2**48
"""Bytes of one shard file (256 TiB, far above any shard; sums over 500k shards still fit int64)."""
INDEX_VERSION = 2
FORMATS = ("mds", "json", "csv", "tsv", "xsv")

_PER_FILE_KEYS = {
    "mds": ("raw_data", "samples", "zip_data"),
    "split": ("raw_data", "raw_meta", "samples", "zip_data", "zip_meta"),
}
_CONFIG_KEYS = {
    "mds": (
        "column_encodings",
        "column_names",
        "column_sizes",
        "compression",
        "format",
        "hashes",
        "size_limit",
        "version",
    ),
    "json": ("columns", "compression", "format", "hashes", "newline", "size_limit", "version"),
    "csv": (
        "column_encodings",
        "column_names",
        "compression",
        "format",
        "hashes",
        "newline",
        "size_limit",
        "version",
    ),
    "tsv": (
        "column_encodings",
        "column_names",
        "compression",
        "format",
        "hashes",
        "newline",
        "size_limit",
        "version",
    ),
    "xsv": (
        "column_encodings",
        "column_names",
        "compression",
        "format",
        "hashes",
        "newline",
        "separator",
        "size_limit",
        "version",
    ),
}


# avoid shadowing the builtin IndexError
class IndexError_(ValueError):
    """A malformed ``index.json`` or shard object; the message names the file and the shard."""


class IndexJSONError(IndexError_, json.JSONDecodeError):
    """An ``index.json`` that is not JSON (empty, truncated):
    a ``json.JSONDecodeError`` too, as upstream raises."""

    def __init__(self, message: str, err: json.JSONDecodeError) -> None:
        json.JSONDecodeError.__init__(self, err.msg, err.doc, err.pos)
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


class IndexNotFoundError(FileNotFoundError, RuntimeError):
    """No ``index.json`` where a dataset was expected (a ``RuntimeError`` too, as upstream raises)."""


@dataclass(frozen=True)
class FileInfo:
    """One file of a shard: its basename (relative to the index directory), size and hex digests.

    ``basename`` is always a safe relative name (``streaming.util.safepath``), normalised: construction checks
    it once, so no ``FileInfo`` can point outside the folder it is joined onto; ``from_json`` names the index
    file and field when the check fails (one check per name: index parsing is on the cold-start path of large
    datasets).
    """

    basename: str
    bytes: int
    hashes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "basename", safe_relpath(self.basename, source="FileInfo", field="basename"))

    def to_json(self) -> dict[str, Any]:
        return {"basename": self.basename, "bytes": self.bytes, "hashes": dict(self.hashes)}

    @classmethod
    def from_json(
        cls, obj: Any, *, where: str, source: str | None = None, field: str = "basename"
    ) -> FileInfo:
        """Validate one file entry.

        Args:
            obj: The decoded entry.
            where: Location for structural errors (index path and shard).
            source: The file the entry came from (for the unsafe-name error; defaults to ``where``).
            field: The basename's field path, e.g. ``shards[3].raw_data.basename``.

        Raises:
            IndexError_: A malformed entry.
            streaming.util.safepath.UnsafePathError: A basename that is absolute, has ``..``, a drive letter
                or a backslash (checked before the name is used for anything).
        """
        if not isinstance(obj, dict) or set(obj) != {"basename", "bytes", "hashes"}:
            raise IndexError_(
                f"{where}: a file entry must have exactly the keys basename, bytes, hashes; got {obj!r}"
            )
        size = obj["bytes"]
        if not isinstance(obj["basename"], str) or type(size) is not int or not 0 <= size <= MAX_FILE_BYTES:
            raise IndexError_(
                f"{where}: bad file entry {obj!r:.300} (bytes: an int from 0 to {MAX_FILE_BYTES})"
            )
        if not isinstance(obj["hashes"], dict):
            raise IndexError_(f"{where}: 'hashes' must be an object of algorithm -> hex digest")
        try:
            return cls(basename=obj["basename"], bytes=obj["bytes"], hashes=dict(obj["hashes"]))
        except UnsafePathError:
            # the same check again, only to name the index file and field
            safe_relpath(obj["basename"], source=source or where, field=field)
            raise


@dataclass(frozen=True)
class ShardInfo:
    """One shard object of ``index.json``.

    ``config`` holds the format's writer config (every key of the shard object except the per-file fields
    ``samples``, ``raw_data``, ``zip_data``, ``raw_meta`` and ``zip_meta``), exactly as serialized.
    """

    format: str
    samples: int
    raw_data: FileInfo
    zip_data: FileInfo | None
    config: dict[str, Any]
    raw_meta: FileInfo | None = None
    zip_meta: FileInfo | None = None

    @property
    def compression(self) -> str | None:
        return self.config.get("compression")

    @property
    def hashes(self) -> list[str]:
        return list(self.config.get("hashes") or [])

    @property
    def column_names(self) -> list[str]:
        if self.format == "json":
            return sorted(self.config["columns"])
        return list(self.config["column_names"])

    @property
    def column_encodings(self) -> list[str]:
        if self.format == "json":
            return [self.config["columns"][k] for k in sorted(self.config["columns"])]
        return list(self.config["column_encodings"])

    @property
    def is_split(self) -> bool:
        """Split formats keep samples and offsets in two files (data + ``.meta``)."""
        return self.format != "mds"

    def files(self) -> list[FileInfo]:
        """Every file entry of this shard (raw and zip, data and meta), skipping absent ones."""
        return [f for f in (self.raw_data, self.zip_data, self.raw_meta, self.zip_meta) if f is not None]

    def stored_files(self) -> list[FileInfo]:
        """The files that exist in a dataset as written: the zip forms when compressed, else the raw forms."""
        if self.zip_data is not None:
            return [f for f in (self.zip_data, self.zip_meta) if f is not None]
        return [f for f in (self.raw_data, self.raw_meta) if f is not None]

    def to_json(self) -> dict[str, Any]:
        obj = dict(self.config)
        obj["samples"] = self.samples
        obj["raw_data"] = self.raw_data.to_json()
        obj["zip_data"] = self.zip_data.to_json() if self.zip_data else None
        if self.is_split:
            obj["raw_meta"] = self.raw_meta.to_json() if self.raw_meta else None
            obj["zip_meta"] = self.zip_meta.to_json() if self.zip_meta else None
        return obj

    def with_prefix(self, prefix: str, *, source: str = "merge_index") -> ShardInfo:
        """A copy whose file basenames are prefixed with ``prefix/`` (used by ``merge_index``).

        Raises:
            streaming.util.safepath.UnsafePathError: ``prefix`` (a partition folder name, from ``source``) is
                not a safe relative name.
        """
        prefix = safe_relpath(prefix, source=source, field="partition folder")

        def fix(info: FileInfo | None) -> FileInfo | None:
            if info is None:
                return None
            return FileInfo(basename=f"{prefix}/{info.basename}", bytes=info.bytes, hashes=info.hashes)

        return ShardInfo(
            format=self.format,
            samples=self.samples,
            raw_data=fix(self.raw_data),  # type: ignore[arg-type]
            zip_data=fix(self.zip_data),
            config=self.config,
            raw_meta=fix(self.raw_meta),
            zip_meta=fix(self.zip_meta),
        )

    @classmethod
    def from_json(cls, obj: Any, *, where: str, source: str | None = None, field: str = "shard") -> ShardInfo:
        """Validate one shard object against its format's exact key set, and every file name in it.

        Args:
            obj: The decoded shard object.
            where: Location for error messages (index path and shard number).
            source: The index file it came from (for unsafe-name errors; defaults to ``where``).
            field: This shard's field path in that file, e.g. ``shards[3]``.
        """
        if not isinstance(obj, dict):
            raise IndexError_(f"{where}: a shard must be a JSON object, got {type(obj).__name__}")
        fmt = obj.get("format")
        if fmt not in FORMATS:
            raise IndexError_(f"{where}: unknown shard format {fmt!r}; expected one of {', '.join(FORMATS)}")
        config_keys = _CONFIG_KEYS[fmt]
        file_keys = _PER_FILE_KEYS["mds" if fmt == "mds" else "split"]
        expected = set(config_keys) | set(file_keys)
        missing, extra = sorted(expected - set(obj)), sorted(set(obj) - expected)
        if missing or extra:
            parts = [
                f"missing keys {missing}" if missing else "",
                f"unexpected keys {extra}" if extra else "",
            ]
            raise IndexError_(f"{where}: {fmt} shard has {' and '.join(p for p in parts if p)}")
        if obj["version"] != INDEX_VERSION:
            raise IndexError_(f"{where}: unsupported shard version {obj['version']!r} (this library reads 2)")
        samples = obj["samples"]
        if type(samples) is not int or not 0 <= samples <= MAX_SHARD_SAMPLES:
            raise IndexError_(
                f"{where}: 'samples' must be an int from 0 to {MAX_SHARD_SAMPLES} (shards count samples in "
                f"uint32), got {samples!r:.100}"
            )
        size_limit = obj["size_limit"]
        if size_limit is not None and (not isinstance(size_limit, int) or size_limit < 0):
            raise IndexError_(f"{where}: 'size_limit' must be null or an int >= 0, got {size_limit!r}")
        _check_config(obj, fmt, where)
        if fmt != "json" and len(obj["column_names"]) != len(obj["column_encodings"]):
            raise IndexError_(f"{where}: column_names and column_encodings differ in length")
        split = fmt != "mds"

        def file(key: str) -> FileInfo:
            return FileInfo.from_json(
                obj[key], where=f"{where} {key}", source=source or where, field=f"{field}.{key}.basename"
            )

        info = cls(
            format=fmt,
            samples=samples,
            raw_data=file("raw_data"),
            zip_data=file("zip_data") if obj["zip_data"] is not None else None,
            config={k: obj[k] for k in config_keys},
            raw_meta=file("raw_meta") if split else None,
            zip_meta=file("zip_meta") if split and obj["zip_meta"] is not None else None,
        )
        if samples == 0:
            _check_empty(info, where)
        return info


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_config(obj: dict[str, Any], fmt: str, where: str) -> None:
    """The types of a shard object's config keys (readers index, hash and join them as such)."""
    problems = []
    if fmt == "json":
        columns = obj["columns"]
        if not isinstance(columns, dict) or not all(isinstance(v, str) for v in columns.values()):
            problems.append("'columns' must be an object of column name -> encoding string")
    else:
        for key in ("column_names", "column_encodings"):
            if not _strings(obj[key]):
                problems.append(f"{key!r} must be a list of strings")
    sizes = obj.get("column_sizes", [])
    if not isinstance(sizes, list) or not all(s is None or (type(s) is int and s >= 0) for s in sizes):
        problems.append("'column_sizes' must be a list of null or ints >= 0")
    if not is_valid_compression(obj["compression"]):
        problems.append(
            f"'compression' must be null or a compression this library reads, got {obj['compression']!r:.80}"
        )
    if obj["hashes"] is not None and not _strings(obj["hashes"]):
        problems.append("'hashes' must be a list of algorithm names")
    for key in ("newline", "separator"):
        if key in obj and not isinstance(obj[key], str):
            problems.append(f"{key!r} must be a string")
    if problems:
        raise IndexError_(f"{where}: {'; '.join(problems)}")


def _check_empty(info: ShardInfo, where: str) -> None:
    """Refuse a shard that index.json says has no samples but whose file is bigger than an empty one: the
    plan never opens a shard of no samples, so its samples would be dropped without a word.

    An empty MDS shard is its 8-byte header and its embedded config (``json.dumps(config, sort_keys=True)``,
    as every writer of the format serializes it); each sample adds at least a 4-byte offset. An empty split
    shard has an empty data file.
    """
    if info.is_split:
        empty = 0
    else:
        empty = 8 + len(json.dumps(info.config, sort_keys=True).encode("utf-8"))
    if info.raw_data.bytes >= empty + (1 if info.is_split else 4):
        raise IndexError_(
            f"{where}: 'samples' is 0 but {info.raw_data.basename} is {info.raw_data.bytes} bytes (an empty "
            f"shard is {empty}): index.json disagrees with the shard, whose samples would never be read; "
            "rebuild the index (`python -m streaming rebuild-index`)"
        )


def recorded_digests(info: ShardInfo) -> set[str]:
    """The hash algorithms index.json records a digest of for every file of shard ``info``."""
    files = info.files()
    return set.intersection(*(set(f.hashes) for f in files)) if files else set()


@dataclass(frozen=True)
class DatasetIndex:
    """A parsed ``index.json``: its location and shards, with cumulative sample offsets."""

    path: str
    shards: list[ShardInfo]

    @property
    def dirname(self) -> str:
        return os.path.dirname(self.path)

    @property
    def num_samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {"shards": [s.to_json() for s in self.shards], "version": INDEX_VERSION}


def index_path(dirname: str, split: str | None = None) -> str:
    """Path of ``index.json`` inside ``dirname[/split]``."""
    return os.path.join(dirname, split, INDEX_FILENAME) if split else os.path.join(dirname, INDEX_FILENAME)


def parse_index(obj: Any, *, path: str, source: str | None = None) -> DatasetIndex:
    """Validate a decoded ``index.json`` object.

    Every shard file name is checked with ``streaming.util.safepath.safe_relpath`` here, at parse time, so
    that nothing downstream (reader, cache, eviction, validation) ever joins a name that leaves the dataset
    folder.

    Args:
        obj: The decoded JSON.
        path: Where the index lives locally (``DatasetIndex.path``).
        source: What to call the file in error messages (e.g. the remote URL it was downloaded from; default
            ``path``).

    Raises:
        IndexError_: A malformed index (names the file and shard).
        streaming.util.safepath.UnsafePathError: An unsafe basename (names the file, the field, e.g.
            ``shards[3].raw_data.basename``, and the value).
    """
    src = source or path
    if not isinstance(obj, dict) or "shards" not in obj or "version" not in obj:
        raise IndexError_(f"{src}: not a dataset index (expected an object with 'version' and 'shards')")
    if obj["version"] != INDEX_VERSION:
        raise IndexError_(
            f"{src}: unsupported index version {obj['version']!r}; this library reads version "
            f"{INDEX_VERSION} (the format written by mosaicml-streaming >= 0.4)"
        )
    if not isinstance(obj["shards"], list):
        raise IndexError_(f"{src}: 'shards' must be a list")
    shards = [
        ShardInfo.from_json(s, where=f"{src} shard {i}", source=src, field=f"shards[{i}]")
        for i, s in enumerate(obj["shards"])
    ]
    return DatasetIndex(path=path, shards=shards)


def load_index(dirname: str, split: str | None = None, *, source: str | None = None) -> DatasetIndex:
    """Read and validate ``dirname[/split]/index.json``.

    Args:
        dirname: Dataset directory.
        split: Optional split sub-directory.
        source: What to call the file in error messages (e.g. the remote URL of a downloaded index).

    Raises:
        FileNotFoundError: If there is no index; the message says how to create one.
        IndexError_: If the index is malformed (names the file and shard).
        streaming.util.safepath.UnsafePathError: If a shard file name is unsafe (names the file, field and
            value).
    """
    path = index_path(dirname, split)
    try:
        # capped at FOUNDRY_MAX_JSON_MB
        raw = read_capped(path, source=source or path)
    except TooLarge as err:
        raise IndexError_(str(err)) from None
    except FileNotFoundError:
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise IndexNotFoundError(
                f"{folder}: no such folder (check the path, or the dataset's split)"
            ) from None
        raise IndexNotFoundError(
            f"No `remote` provided, but local file {path} does not exist (no {INDEX_FILENAME} there): write "
            "the dataset with MDSWriter/JSONWriter/CSVWriter, or recreate the index from its shards with "
            f"`python -m streaming rebuild-index {folder}`"
        ) from None
    try:
        # nesting capped: a deep value is one error, not a crash
        obj = parse_json(raw, source=source or path)
    except NotJSON as err:
        if isinstance(err.__cause__, json.JSONDecodeError):
            raise IndexJSONError(
                f"Index file at {path} is empty or corrupted: {err}", err.__cause__
            ) from None
        raise IndexError_(str(err)) from None
    except TooLarge as err:
        raise IndexError_(str(err)) from None
    return parse_index(obj, path=path, source=source)


def dump_index(obj: dict[str, Any], *, sort_keys: bool = True) -> str:
    """Serialize an index (or shard config) the way the reference writer does."""
    return json.dumps(obj, sort_keys=sort_keys)


def write_index(index: DatasetIndex | dict[str, Any], path: str) -> None:
    """Atomically write ``index.json`` at ``path`` (temp file in the same directory, then rename)."""
    obj = index.to_json() if isinstance(index, DatasetIndex) else index
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dump_index(obj))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
