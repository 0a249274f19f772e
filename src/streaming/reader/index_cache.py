"""A stream's shards as a ``ShardTable``: numbers in arrays,
``ShardInfo`` built only for shards that are read.

Design note (the 500k-shard cold start): parsing and validating ``index.json`` costs ~10 us and ~2 KB of
Python objects per shard, paid by every rank of every run. A large index (``min_bytes`` and up) is therefore
parsed and validated once per node (same ``load_index`` as always, so a bad index fails with the same errors,
unsafe names included) and stored in a binary cache file in the per-user cache folder
(``<default_cache_base()>/indexes/<hash of the index path>.idx``, a private folder): the samples and bytes of
every shard as int64 arrays, and each shard object's canonical JSON text (``sort_keys``) with its offsets. A
rank then loads two arrays (16 bytes per shard) and reads a shard's JSON slice with one ``pread`` when the
shard is first used, building its ``ShardInfo`` through the same ``ShardInfo.from_json`` as eager parsing (so
the object is identical and its names are checked again). The canonical texts, joined, are also what
``Stream.fingerprint`` hashes, so the fingerprint needs no parsing either.

Trust and invalidation: the file records the index's path, size, mtime and inode, a CRC-32 of its arrays, one
CRC-32 per shard text and one of all texts. Opening checks the key, the file size and the arrays' CRC (32
bytes per shard: every rank of a node opens the file, so it must not read the ~250 bytes per shard of text,
140 MB at 500k shards, to start); a mismatch, a truncated or corrupt file is rebuilt, never trusted. A shard's
text is checked against its CRC when it is read, and the whole text when it is streamed (``fingerprint``):
damage found there drops the cache file and the table falls back to parsing ``index.json`` (the next start
rebuilds). Builders take a file lock per cache file and write a temp file then rename, so concurrent ranks end
with one valid cache and readers never see a partial one. Small indexes (below ``min_bytes``) and unwritable
cache folders are parsed eagerly as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from streaming.cache.locks import file_lock
from streaming.format.encodings import is_encoding_safe
from streaming.format.index import DatasetIndex, ShardInfo, index_path, load_index
from streaming.reader.shard_sequence import ShardSequence

__all__ = ["CACHE_VERSION", "MIN_CACHE_BYTES", "CacheDamaged", "ShardTable", "cache_file", "load_shard_table"]

CACHE_VERSION = 2  # 2: per-shard text CRCs, the open check covers the arrays only
# ~3.5k shards of a typical MDS index; below that, parsing costs < ~0.05 s
MIN_CACHE_BYTES = 1 << 20
_MAGIC = b"SDSIDX02"
_MEMO = 4096  # ShardInfo objects kept per stream (a rank touches few shards at a time)


def _first_unsafe(shards: Sequence[ShardInfo]) -> int:
    """Index of the first shard with an unsafe (pickle) column encoding, or -1."""
    for i, sh in enumerate(shards):
        if not all(is_encoding_safe(e) for e in sh.column_encodings):
            return i
    return -1


class ShardTable(ShardSequence):
    """One stream's shards: ``samples`` and ``total_bytes`` arrays, ``ShardInfo`` objects on demand.

    Attributes:
        samples: Samples per shard (int64).
        total_bytes: Bytes of all files of each shard (int64).
        compressed: Whether some shard is stored compressed.
        first_unsafe: The first shard with a pickle column (-1: none).
    """

    def __init__(
        self,
        *,
        path: str,
        source: str | None,
        samples: np.ndarray,
        total_bytes: np.ndarray,
        compressed: bool,
        first_unsafe: int,
        eager: list[ShardInfo] | None = None,
        blob: tuple[str, int, np.ndarray, np.ndarray, int] | None = None,
    ) -> None:
        self.path, self.source = path, source
        self.samples, self.total_bytes = samples, total_bytes
        self.compressed, self.first_unsafe = compressed, first_unsafe
        self._eager = eager
        # (cache file, offset of the text, int64 offsets [n + 1] into it, CRC-32 of each text, of all texts)
        self._blob = blob
        self._memo: dict[int, ShardInfo] = {}

    @classmethod
    def from_index(cls, index: DatasetIndex, *, source: str | None = None) -> ShardTable:
        """An eager table over a parsed index."""
        return cls(
            path=index.path,
            source=source,
            samples=np.array([s.samples for s in index.shards], dtype=np.int64),
            total_bytes=np.array([sum(f.bytes for f in s.files()) for s in index.shards], dtype=np.int64),
            compressed=any(s.zip_data is not None for s in index.shards),
            first_unsafe=_first_unsafe(index.shards),
            eager=index.shards,
        )

    @property
    def is_cached(self) -> bool:
        return self._blob is not None

    def __len__(self) -> int:
        return len(self.samples)

    def _shard(self, i: int) -> ShardInfo:
        if self._eager is not None:
            return self._eager[i]
        info = self._memo.get(i)
        if info is None:
            if len(self._memo) >= _MEMO:
                self._memo.clear()
            info = self._memo[i] = self._materialize(i)
        return info

    def _materialize(self, i: int) -> ShardInfo:
        file, base, offsets, crcs, _ = self._blob  # type: ignore[misc]
        start, end = int(offsets[i]), int(offsets[i + 1]) - 2
        fd = os.open(file, os.O_RDONLY)
        try:
            text = os.pread(fd, end - start, base + start)
        finally:
            os.close(fd)
        if zlib.crc32(text) != int(crcs[i]):
            self._fall_back()
            return self[i]
        src = self.source or self.path
        return ShardInfo.from_json(
            json.loads(text), where=f"{src} shard {i}", source=src, field=f"shards[{i}]"
        )

    def _fall_back(self) -> None:
        """The cache file is damaged: drop it (the next start rebuilds it) and parse ``index.json``
        instead."""
        file = self._blob[0] if self._blob is not None else None
        index = load_index(os.path.dirname(self.path), source=self.source)
        if len(index.shards) != len(self):
            raise OSError(
                f"{self.path} changed while its cache {file} was in use; restart to rebuild the cache"
            )
        self._eager, self._blob = index.shards, None
        if file is not None:
            with contextlib.suppress(OSError):
                os.unlink(file)

    def json_chunks(self) -> Iterator[bytes]:
        """The shards' canonical JSON texts joined by ``", "`` (``json.dumps(list, sort_keys=True)`` minus the
        brackets), in pieces. Raises ``CacheDamaged`` at the end if the cached text fails its checksum (the
        table has then fallen back to ``index.json``: iterate again)."""
        if self._blob is None:
            for k, sh in enumerate(self._eager or []):
                yield (", " if k else "").encode() + json.dumps(sh.to_json(), sort_keys=True).encode()
            return
        file, base, offsets, _, blob_crc = self._blob
        remaining = max(0, int(offsets[-1]) - 2)
        crc = 0
        with open(file, "rb") as f:
            f.seek(base)
            while remaining > 0:
                piece = f.read(min(remaining, 1 << 22))
                if not piece:
                    raise OSError(f"{file}: truncated while reading")
                remaining -= len(piece)
                crc = zlib.crc32(piece, crc)
                yield piece
        if crc != blob_crc:
            self._fall_back()
            raise CacheDamaged(file)

    def fingerprint(self, weights: dict[str, Any]) -> str:
        """``sha256(json.dumps({**weights, "shards": [shard.to_json()...]}, sort_keys=True))[:16]``,
        streamed."""
        head = json.dumps(weights, sort_keys=True)
        assert all(k < "shards" for k in weights), "the shards key must sort last"
        for _ in range(
            2
        ):  # a damaged cache is noticed at the end of the text; the second pass parses instead
            digest = hashlib.sha256((head[:-1] + (", " if weights else "") + '"shards": [').encode())
            try:
                for chunk in self.json_chunks():
                    digest.update(chunk)
            except CacheDamaged:
                continue
            digest.update(b"]}")
            return digest.hexdigest()[:16]
        raise AssertionError("unreachable: the fallback table is eager")


class CacheDamaged(OSError):
    """A cache file's text failed its checksum after the file was opened (the table fell back to parsing)."""


def cache_file(cache_dir: str, path: str) -> str:
    """The cache file of the index at ``path`` inside ``cache_dir``."""
    digest = hashlib.blake2s(os.path.realpath(path).encode(), digest_size=16).hexdigest()
    return os.path.join(cache_dir, f"{digest}.idx")


def _key(path: str) -> list[Any]:
    st = os.stat(path)
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, CACHE_VERSION]


def _write_cache(file: str, key: list[Any], table: ShardTable) -> None:
    """Write ``table`` (eager) as a cache file: temp file, then an atomic rename."""
    texts = [json.dumps(sh.to_json(), sort_keys=True).encode() for sh in table]
    blob = b", ".join(texts)
    # shard i's text is blob[offsets[i] : offsets[i + 1] - 2] (each is followed by ", ", the last virtually)
    offsets = np.concatenate([[0], np.cumsum([len(t) + 2 for t in texts])]).astype(np.int64)
    crcs = np.array([zlib.crc32(t) for t in texts], dtype=np.int64)
    arrays = [table.samples, table.total_bytes, offsets, crcs]
    body = [a.astype("<i8").tobytes() for a in arrays] + [blob]
    crc = 0
    for part in body[:-1]:
        crc = zlib.crc32(part, crc)
    head = {
        "key": key,
        "n": len(table),
        "blob_len": len(blob),
        "compressed": table.compressed,
        "first_unsafe": table.first_unsafe,
        "crc32": crc,
        "blob_crc32": zlib.crc32(blob),
    }
    header = json.dumps(head).encode()
    header += b" " * (-(len(header) + 16) % 8)
    tmp = f"{file}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(_MAGIC + len(header).to_bytes(8, "little") + header)
        for part in body:
            f.write(part)
    os.replace(tmp, file)


def _open_cache(file: str, key: list[Any], *, path: str, source: str | None) -> ShardTable | None:
    """The table in ``file`` if it is a complete, intact cache of the index ``key`` names; else None."""
    try:
        with open(file, "rb") as f:
            if f.read(8) != _MAGIC:
                return None
            hlen = int.from_bytes(f.read(8), "little")
            head = json.loads(f.read(hlen))
            n, blob_len = int(head["n"]), int(head["blob_len"])
            base = 16 + hlen
            if head["key"] != key or os.fstat(f.fileno()).st_size != base + 8 * (4 * n + 1) + blob_len:
                return None
            arrays = f.read(8 * (4 * n + 1))
            if zlib.crc32(arrays) != head["crc32"]:
                return None
            blob_crc = int(head["blob_crc32"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    values = np.frombuffer(arrays, dtype="<i8").astype(np.int64)
    return ShardTable(
        path=path,
        source=source,
        samples=values[:n],
        total_bytes=values[n : 2 * n],
        compressed=bool(head["compressed"]),
        first_unsafe=int(head["first_unsafe"]),
        blob=(file, base + 8 * (4 * n + 1), values[2 * n : 3 * n + 1], values[3 * n + 1 :], blob_crc),
    )


def load_shard_table(
    dirname: str,
    split: str | None = None,
    *,
    source: str | None = None,
    cache_dir: str | Callable[[], str | None] | None,
    min_bytes: int | None = None,
) -> ShardTable:
    """The shards of ``dirname[/split]/index.json``, from the node's cache when the index is large.

    Args:
        dirname: Dataset directory.
        split: Optional split sub-directory.
        source: What to call the index in error messages (as ``load_index``).
        cache_dir: Folder of cache files, or a function giving it, called only for a large index (None: no
            cache, parse eagerly).
        min_bytes: Indexes smaller than this are parsed eagerly (default ``MIN_CACHE_BYTES``).

    Raises:
        The errors of ``load_index`` (missing, malformed index, unsafe names),
        whether or not a cache is built.
    """
    path = index_path(dirname, split)
    try:
        size = os.path.getsize(path)
    except OSError:
        size = -1  # load_index raises its own error
    if callable(cache_dir) and size >= (MIN_CACHE_BYTES if min_bytes is None else min_bytes):
        cache_dir = cache_dir()
    if (
        cache_dir is None
        or callable(cache_dir)
        or size < (MIN_CACHE_BYTES if min_bytes is None else min_bytes)
    ):
        return ShardTable.from_index(load_index(dirname, split, source=source), source=source)
    key = _key(path)
    file = cache_file(cache_dir, path)
    table = _open_cache(file, key, path=path, source=source)
    if table is not None:
        return table
    try:
        # the lock folder is its sibling: it no longer creates the folder
        os.makedirs(cache_dir, exist_ok=True)
    except OSError:
        return ShardTable.from_index(load_index(dirname, split, source=source), source=source)
    # one builder per node; the others wait, then read
    with file_lock(cache_dir, os.path.basename(file)):
        table = _open_cache(file, key, path=path, source=source)
        if table is not None:
            return table
        eager = ShardTable.from_index(load_index(dirname, split, source=source), source=source)
        try:
            _write_cache(file, key, eager)
        except OSError:
            return eager
    table = _open_cache(file, key, path=path, source=source)
    return eager if table is None else table
