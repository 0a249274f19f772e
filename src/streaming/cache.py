"""The node-level shard cache: one download per shard per node, crash-safe, bounded by ``cache_limit``.

Coordination uses only the file system, so any number of processes, jobs or users sharing a cache
directory cooperate without shared memory or a clean-up step:
- each shard has a lock file (``.locks/<shard>.lock``, ``fcntl.flock``); whoever holds it downloads while the
  others wait, then find the file present. The kernel drops the lock when a process dies, even by
  ``kill -9``, and a file only ever appears under its real name complete (temp name + rename), so a crashed
  download leaves nothing that can be mistaken for a shard; its temp files are removed by the next holder;
- a cache-wide lock serializes eviction decisions. Usage is measured from the files present (no counter
  to go stale). The victim is the shard whose next use in the plan is farthest away (Belady), never one
  being prepared, and never a shard whose only copy is local (a stream with no remote).
Deleting a shard another process has memory-mapped is safe on POSIX: its mapping stays valid.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from streaming.format.index import INDEX_FILENAME, FileInfo, ShardInfo
from streaming.format.reader import decompress_shard
from streaming.sizes import format_bytes
from streaming.storage import RetryPolicy, download_file
from streaming.storage.url import join_url

__all__ = ["CacheTooSmallError", "CachedShard", "ShardCache", "fetch_index", "minimum_cache_bytes"]

log = logging.getLogger("streaming.cache")
LOCK_DIR = ".locks"


class CacheTooSmallError(ValueError):
    """``cache_limit`` is below what the epoch plan needs resident at once."""


@dataclass(frozen=True)
class CachedShard:
    """A shard of one stream, as the cache sees it."""

    local: str
    """The stream's local directory (holding ``index.json``)."""
    remote: str | None
    """The stream's remote directory URL, or None when the local copy is the only one."""
    info: ShardInfo
    policy: RetryPolicy | None = None
    """Download retries/timeout for this shard's stream (None: the cache's default)."""
    validate_hash: str | None = None
    """Hash algorithm verified after download (None: no check)."""

    @property
    def evictable(self) -> bool:
        return self.remote is not None

    def resident_files(self) -> list[FileInfo]:
        """Files kept on disk once prepared: the raw forms (zip forms are removed after decompression)."""
        return [f for f in (self.info.raw_data, self.info.raw_meta) if f is not None]

    @property
    def resident_bytes(self) -> int:
        return sum(f.bytes for f in self.resident_files())

    @property
    def peak_bytes(self) -> int:
        """Bytes on disk while preparing: raw plus compressed forms."""
        return sum(f.bytes for f in self.info.files())


def minimum_cache_bytes(shards: Sequence[CachedShard], *, concurrent: int) -> int:
    """The smallest workable ``cache_limit``: the ``concurrent`` largest shards resident at once, plus
    the peak of preparing one more."""
    sizes = sorted((s.resident_bytes for s in shards), reverse=True)
    peak = max((s.peak_bytes for s in shards), default=0)
    return sum(sizes[:concurrent]) + peak


@contextmanager
def _file_lock(directory: str, name: str, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive flock on ``directory/.locks/<name>.lock``; yields False if not ``blocking`` and taken."""
    lock_dir = os.path.join(directory, LOCK_DIR)
    os.makedirs(lock_dir, exist_ok=True)
    fd = os.open(os.path.join(lock_dir, name.replace("/", "__") + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def fetch_index(remote: str, local: str, *, policy: RetryPolicy | None = None) -> str:
    """Download ``remote/index.json`` into ``local`` once per node (other processes wait, then reuse it).

    An index already present locally is kept (a dataset is immutable once published).
    """
    path = os.path.join(local, INDEX_FILENAME)
    if os.path.exists(path):
        return path
    os.makedirs(local, exist_ok=True)
    with _file_lock(local, INDEX_FILENAME):
        if not os.path.exists(path):
            download_file(join_url(remote, INDEX_FILENAME), path, policy=policy)
    return path


class ShardCache:
    """Prepares shards (download, verify, decompress) on demand for every stream of a dataset.

    Args:
        shards: Every shard of the dataset, in global shard order.
        cache_limit: Bytes allowed on disk for evictable shards (None = unlimited).
        policy: Download retries and timeout.
        validate_hash: Hash algorithm to verify on download (None = no check).
        concurrent: How many shards the plan may need resident at once on this node (for the minimum).
    """

    def __init__(
        self,
        *,
        shards: Sequence[CachedShard],
        cache_limit: int | None = None,
        policy: RetryPolicy | None = None,
        validate_hash: str | None = None,
        concurrent: int = 2,
    ) -> None:
        self.shards = list(shards)
        self.cache_limit = cache_limit
        self.policy = policy or RetryPolicy()
        self.validate_hash = validate_hash
        self.downloads = 0
        self._root = self.shards[0].local if self.shards else "."
        if cache_limit is not None:
            minimum = minimum_cache_bytes(self.shards, concurrent=concurrent)
            if cache_limit < minimum:
                raise CacheTooSmallError(
                    f"cache_limit={format_bytes(cache_limit)} is too small: the plan needs about {concurrent} "
                    f"shards resident at once, at least {format_bytes(minimum)} ({minimum} bytes) for this dataset; "
                    f"raise cache_limit or use smaller shards"
                )

    # ------------------------------------------------------------------ locks

    @staticmethod
    def _lock(directory: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return _file_lock(directory, name, blocking=blocking)

    # ------------------------------------------------------------------ state

    @staticmethod
    def is_present(shard: CachedShard) -> bool:
        """All raw files present (complete: they only appear by rename), or all stored files present."""
        raw = all(os.path.exists(os.path.join(shard.local, f.basename)) for f in shard.resident_files())
        return raw or all(
            os.path.exists(os.path.join(shard.local, f.basename)) for f in shard.info.stored_files()
        )

    def usage(self) -> int:
        """Bytes of evictable shard files currently on disk."""
        total = 0
        for shard in self.shards:
            if not shard.evictable:
                continue
            for f in shard.info.files():
                try:
                    total += os.stat(os.path.join(shard.local, f.basename)).st_size
                except FileNotFoundError:
                    pass
        return total

    # ------------------------------------------------------------------ operations

    def prepare(self, shard_id: int, *, next_use: Callable[[int], float] | None = None) -> None:
        """Make shard ``shard_id`` readable locally (raw files present); blocks while another process does it.

        Args:
            shard_id: Global shard index.
            next_use: Plan position at which each shard is next needed (``inf`` = not again); used to
                pick eviction victims. Without it, the least recently used shard goes first.
        """
        shard = self.shards[shard_id]
        if self._ready(shard):
            return
        with self._lock(shard.local, shard.info.raw_data.basename):
            if self._ready(shard):
                return
            for stale in glob.glob(
                os.path.join(shard.local, glob.escape(shard.info.raw_data.basename) + "*.tmp-*")
            ):
                os.remove(stale)  # left by a process that died mid-download
            if shard.remote is None:
                if not self.is_present(shard):
                    raise FileNotFoundError(
                        f"shard {shard.info.raw_data.basename} is missing from {shard.local} and the stream has "
                        "no remote to download it from"
                    )
            elif self.cache_limit is not None:
                self._make_room(shard_id, shard.peak_bytes, next_use)
            self._fetch(shard)

    def _ready(self, shard: CachedShard) -> bool:
        return all(os.path.exists(os.path.join(shard.local, f.basename)) for f in shard.resident_files())

    def _fetch(self, shard: CachedShard) -> None:
        for info in shard.info.stored_files():
            path = os.path.join(shard.local, info.basename)
            if os.path.exists(path):
                continue
            assert shard.remote is not None
            download_file(
                join_url(shard.remote, info.basename),
                path,
                policy=self.policy,
                expected_hashes=info.hashes,
                validate_hash=self.validate_hash,
            )
            self.downloads += 1
        if shard.info.zip_data is not None:
            decompress_shard(shard.local, shard.info)
            if shard.evictable:  # the compressed form is only a transport format once raw is present
                for info in (shard.info.zip_data, shard.info.zip_meta):
                    if info is not None and os.path.exists(os.path.join(shard.local, info.basename)):
                        os.remove(os.path.join(shard.local, info.basename))

    def _make_room(self, shard_id: int, needed: int, next_use: Callable[[int], float] | None) -> None:
        assert self.cache_limit is not None
        with self._lock(self._root, "cache"):
            usage = self.usage()
            if usage + needed <= self.cache_limit:
                return
            candidates = [
                k for k, s in enumerate(self.shards) if k != shard_id and s.evictable and self._ready(s)
            ]
            # Farthest next use first; among equals (e.g. not needed again), least recently used first.
            candidates.sort(key=lambda k: self._atime(self.shards[k]))
            if next_use is not None:
                candidates.sort(key=lambda k: next_use(k), reverse=True)
            for victim in candidates:
                if usage + needed <= self.cache_limit:
                    break
                usage -= self._evict(victim)
            if usage + needed > self.cache_limit:
                log.warning(
                    "cache: %s over cache_limit after evicting every idle shard",
                    format_bytes(usage + needed - self.cache_limit),
                )

    @staticmethod
    def _atime(shard: CachedShard) -> float:
        try:
            return os.stat(os.path.join(shard.local, shard.info.raw_data.basename)).st_mtime
        except FileNotFoundError:
            return 0.0

    def _evict(self, shard_id: int) -> int:
        shard = self.shards[shard_id]
        freed = 0
        # Never wait for a shard lock while holding the cache lock: a busy shard is being prepared, skip it.
        with self._lock(shard.local, shard.info.raw_data.basename, blocking=False) as held:
            if not held:
                return 0
            for f in shard.info.files():
                path = os.path.join(shard.local, f.basename)
                try:
                    freed += os.stat(path).st_size
                    os.remove(path)
                except FileNotFoundError:
                    pass
        log.debug("cache: evicted %s (%s)", shard.info.raw_data.basename, format_bytes(freed))
        return freed
