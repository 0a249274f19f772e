"""The node-level shard cache: one download per shard per node, crash-safe, ``cache_limit`` a ceiling, and a
locking protocol that cannot deadlock.

Coordination uses only the file system (``streaming.cache.locks``: ``flock``, dropped by the kernel when its
holder dies), so any number of threads, processes and jobs sharing a cache directory cooperate without shared
memory or clean-up. Files appear under their real names only complete (temp + rename). ``cache_limit``: bytes
are reserved before any file is created and idle shards evicted until disk plus live reservations fit
(``streaming.cache.space``); the first use by a process brings a cache left over the limit by a crash back
under it. Victims: farthest next use by any reader of the folder (this reader's plan and the demand boards
the others publish, ``streaming.cache.demand``), then the oldest; never a shard whose only copy is local.
Shard files whose index entry records digests are verified (by default with the fastest one; ``validate_hash``
picks one or turns it off) on download and before this process first uses a cached copy, the verdict
remembered on disk (``streaming.cache.verify``); a mismatch downloads it again or, with no remote, raises
naming the file and both digests.

What an index cannot make the cache do: write more than it declares (downloads and decompression stop as soon
as a file passes the size index.json gives it, ``max_bytes``, with an error naming the shard and both sizes),
or write or delete through a symbolic link inside the cache folder (``streaming.util.safepath.refuse_links``,
checked by the preparer under the prepare lock, by eviction and for the lock folder).

Protocol. Each evictable shard has two locks; the cache folder has one more.

- *use lock* (``locks.use_lock``): held **shared** by every reader that has the shard open (a *pin*), for as
  long as the reader is open, across ``yield`` s (a DataLoader worker parked on a full queue keeps it), and by
  a reader that reads the first sample from the file while a pool thread prepares the shard, from before that
  preparation until the read closes the file (``held_while_prepared``: the shard is not present yet, so it is
  not a ``Pins`` pin). Taken **exclusively** only by eviction, which never waits for it.
- *prepare lock* (``locks.prep_lock``): held exclusively by the one thread that changes the shard's files:
  download, hash check (deleting a bad file), decompression, eviction. Waiting to see a preparer finish holds
  it shared.
- *cache lock*: held while the disk and the reservations are read and victims chosen. The threads of one
  process first queue on an in-process lock (``SpaceKeeper``), so at most one of them waits on or holds the
  file lock; the in-process lock is taken only right before the cache lock and nothing else is taken while
  either is held but the shard locks eviction only tries, so it adds no wait to the list below.

States of a shard: *absent*; *being prepared* (prepare lock held, temp files, a reservation); *present*
(every raw file under its real name); *pinned* (present, use lock held shared by one or more readers). Only a
present, unpinned shard whose prepare lock is free becomes absent again (eviction: cache lock held, both shard
locks taken without waiting, files unlinked). A reader gets its shard with ``acquire``: prepare it if needed,
and pin it *before* letting go of the prepare lock, so no eviction fits between the two (a reader never finds
its shard gone, whatever other jobs do); a shard prepared ahead (``prepare``, unpinned) and evicted before it
is read is simply prepared again.

Who waits for whom. A thread blocks on a lock only where every holder of a conflicting mode finishes without
itself waiting for anything that may not end:

1. use lock, shared (``pin``, ``held_while_prepared``): conflicts only with an eviction, which holds it for a
   few unlinks. A first-sample reader holding it waits for the shard's preparer (2), which waits on no reader.
2. prepare lock: its holder waits only for (1), for the network (bounded by the download timeout and
   retries), for its own CPU work and, in a prefetch, for the cache lock (3: a prefetch claims its shard
   before it reserves, and its reservation never waits for space); never for space or another shard's lock.
3. cache lock (and the in-process lock before it): its holder only *tries* shard locks (never waits) and
   reads, writes and deletes small files.
4. space (``SpaceKeeper.reserve``), the one wait on readers: a shard's space is freed when its pins go. It
   is entered holding no prepare lock and no cache lock. A prefetch never waits for it (``wait=False``). A
   reader (``acquire``) first drops its own idle pins (``on_full``), then waits at most ``fallback_after``
   seconds (not at all while the previous wait failed too) and, if the cache is still full, reads the shard
   into memory without keeping it (``read_unkept``, logged once): it never exceeds the limit and never waits
   for ever, however many readers share the cache. Where memory files do not exist (not Linux) it waits
   ``wait_timeout`` and raises ``CacheTooSmallError`` (naming the limit to raise).

The pins are the only locks held across a ``yield``, so the only ones that may be held for ever (a worker's
pins while the loader waits for another worker), and nobody blocks on a mode that conflicts with a pin:
evictions only try, and the wait for space (4) is bounded. Every other wait is on a holder that finishes:
(1) an eviction, which waits for nothing; (2) a preparer, which waits only for (1) and the network; (3) a
holder that waits for nothing. So no cycle of waits can form, the DataLoader's in-order wait on its workers
included, and no thread waits for ever. Apart from a reader's own pins (``held_while_prepared`` included),
the only locks ever taken while holding another are the use lock under the prepare lock, in that order
everywhere (eviction tries them in the same order), the cache lock under its process's in-process lock
(always that order; the file lock is never taken without it), and those two under a prefetch's prepare lock
(a holder of the cache lock only tries shard locks, so it never waits for that prefetch).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from stackbase.bounded import json_max_bytes
from streaming.cache.locks import file_lock, lock_dir, prep_lock, try_lock, use_lock
from streaming.cache.pins import Pins
from streaming.cache.space import CacheTooSmallError, SpaceEntry, SpaceKeeper, release_reservation
from streaming.cache.verify import record_verdict, verdict_path, verify_file
from streaming.format.hashing import hash_to_check
from streaming.format.index import INDEX_FILENAME, FileInfo, ShardInfo, recorded_digests
from streaming.format.mds import ShardFormatError
from streaming.format.reader import decompress_shard
from streaming.storage import RetryPolicy, download_file
from streaming.storage.ranged import RangeBudget
from streaming.storage.transfer import (
    DEFAULT_RANGED,
    HashMismatchError,
    can_download_to_memory,
    download_to_memory,
)
from streaming.storage.url import join_url, redact
from streaming.util.safepath import refuse_links, safe_join
from streaming.util.sizes import SizeLimitExceeded, format_bytes

__all__ = ["CacheTooSmallError", "CachedShard", "ShardCache", "fetch_index", "minimum_cache_bytes"]

log = logging.getLogger("streaming.cache")


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
    """How to verify on download and on first use of a cached copy (``streaming.format.hashing.
    check_validate_hash``'s forms; None: the cache's default)."""
    keep_zip: bool = False
    """Keep the compressed files after decompression (they count against ``cache_limit`` and are evicted with
    the shard)."""

    @property
    def evictable(self) -> bool:
        return self.remote is not None

    def resident_files(self) -> list[FileInfo]:
        """Files kept on disk once prepared: the raw forms, and the zip forms with ``keep_zip`` (else they are
        removed after decompression)."""
        raw = [f for f in (self.info.raw_data, self.info.raw_meta) if f is not None]
        if self.keep_zip:
            raw += [f for f in (self.info.zip_data, self.info.zip_meta) if f is not None]
        return raw

    @property
    def resident_bytes(self) -> int:
        return sum(f.bytes for f in self.resident_files())

    @property
    def peak_bytes(self) -> int:
        """Bytes on disk while preparing: raw plus compressed forms."""
        return sum(f.bytes for f in self.info.files())


@contextmanager
def _declared_size(shard: CachedShard, f: FileInfo, url: str) -> Iterator[None]:
    """A download of ``f`` past its declared size becomes an error naming the shard and both sizes."""
    try:
        yield
    except SizeLimitExceeded as err:
        raise ShardFormatError(
            f"shard file {f.basename} in {shard.local}: the object at {redact(url)} is larger than the "
            f"{f.bytes} bytes index.json declares ({err}); the download stopped there and nothing was kept. "
            "The remote file or its index is wrong: rebuild the index (`python -m streaming "
            "rebuild-index`) or restore the file"
        ) from None


def minimum_cache_bytes(shards: Sequence[CachedShard], *, concurrent: int) -> int:
    """The smallest workable ``cache_limit``: the ``concurrent`` largest shards resident at once, plus
    the peak of preparing one more."""
    sizes = sorted((s.resident_bytes for s in shards), reverse=True)
    peak = max((s.peak_bytes for s in shards), default=0)
    return sum(sizes[:concurrent]) + peak


SOURCE_FILE = "source.json"
"""In the lock folder: the remote a cache folder was filled from (redacted),
so it is never used for another."""


def fetch_index(remote: str, local: str, *, policy: RetryPolicy | None = None) -> str:
    """Download ``remote/index.json`` into ``local`` once per node (other processes wait, then reuse it).

    An index already present locally is kept (a dataset is immutable once published). The folder records the
    remote it was filled from; a stream with another remote is refused (its shards have the same names, so
    they would be read from the wrong dataset).

    Raises:
        ValueError: ``local`` holds a copy of another remote.
    """
    path = os.path.join(local, INDEX_FILENAME)
    marker = os.path.join(lock_dir(local), SOURCE_FILE)
    mine = redact(remote.rstrip("/"))
    if os.path.exists(path) and _recorded_source(marker) == mine:
        # every rank and worker after the first: no lock (the marker is written by rename)
        return path
    os.makedirs(local, exist_ok=True)
    with file_lock(local, INDEX_FILENAME):
        _check_source(local, marker, mine)
        if not os.path.exists(path):
            # one request, capped: an index larger than any JSON file may be is refused
            download_file(
                join_url(remote, INDEX_FILENAME), path, policy=policy, max_bytes=json_max_bytes(), ranged=None
            )
    return path


def _recorded_source(marker: str) -> str | None:
    try:
        with open(marker) as f:
            return json.load(f).get("remote")
    except (OSError, ValueError, AttributeError):
        return None


def _check_source(local: str, marker: str, mine: str) -> None:
    """Record ``mine`` (a redacted remote) as ``local``'s source, or refuse a different one (holding the index
    lock)."""
    theirs = _recorded_source(marker)
    if theirs is None:
        tmp = f"{marker}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"remote": mine}, f)
        os.replace(tmp, marker)
    elif theirs != mine:
        raise ValueError(
            f"local={local} holds a copy of {theirs}, but this stream's remote is {mine}: shards of two "
            "datasets would share file names there; give this stream its own "
            "local folder (or delete that one)"
        )


class ShardCache:
    """Prepares shards (download, verify, decompress) on demand for every stream of a dataset.

    Args:
        shards: Every shard of the dataset, in global shard order.
        cache_limit: Bytes allowed on disk for evictable shards, temp files included (None = unlimited).
        policy: Download retries and timeout (for shards that name none).
        validate_hash: How to verify shards that say nothing (``check_validate_hash``'s forms; None: with the
            fastest digest the index records, if any).
        concurrent: How many shards the plan may need resident at once on this node (for the minimum).
        wait_timeout: Seconds ``prepare`` waits for other readers to free space before giving up with an
            error.
        fallback_after: Seconds ``acquire`` (a reader) waits for other readers to free space before it returns
            False, so the shard is read without keeping it (``read_unkept``). None, or where memory files are
            not available (not Linux): wait ``wait_timeout`` s, then raise.
        ranged: How shard downloads split into parallel ranges, shared among those in flight
            (``streaming.storage.ranged.RangeBudget``; None: one budget for this cache, shared by no process).
    """

    def __init__(
        self,
        *,
        shards: Sequence[CachedShard],
        cache_limit: int | None = None,
        policy: RetryPolicy | None = None,
        validate_hash: str | None = None,
        concurrent: int = 2,
        wait_timeout: float = 600.0,
        fallback_after: float | None = 1.0,
        ranged: RangeBudget | None = None,
    ) -> None:
        self.ranged = ranged or RangeBudget(DEFAULT_RANGED)
        self.shards = list(shards)
        self.cache_limit = cache_limit
        self.policy = policy or RetryPolicy()
        self.validate_hash = validate_hash
        self.wait_timeout = wait_timeout
        self.fallback_after = fallback_after if can_download_to_memory() else None
        self.downloads = 0
        self.unkept_reads = 0
        """Shards read into memory without keeping them, the cache being full of shards in use."""
        # the last acquire found no space: the next one does not wait for it
        self._short_of_space = False
        self._root = self.shards[0].local if self.shards else "."
        self._paths = [
            {
                f.basename: safe_join(
                    s.local, f.basename, source=os.path.join(s.local, INDEX_FILENAME), field=f"shard {k} file"
                )
                for f in s.info.files()
            }
            for k, s in enumerate(self.shards)
        ]
        entries = {
            k: SpaceEntry(local=s.local, lock_name=self._lock_name(k), paths=tuple(self._paths[k].values()))
            for k, s in enumerate(self.shards)
            if s.evictable
        }
        self._space = SpaceKeeper(self._root, entries, cache_limit, wait_timeout)
        self._verified: set[int] = set()
        self._pins = Pins()
        self._started = False
        self._start_lock = threading.Lock()
        if cache_limit is not None:
            minimum = minimum_cache_bytes(self.shards, concurrent=concurrent)
            if cache_limit < minimum:
                raise CacheTooSmallError(
                    f"cache_limit={format_bytes(cache_limit)} is too small: the plan needs about "
                    f"{concurrent} shards resident at once, at least {format_bytes(minimum)} ({minimum} "
                    "bytes) for this dataset; raise cache_limit or use smaller shards"
                )

    @staticmethod
    def is_present(shard: CachedShard) -> bool:
        """All raw files present (complete: they only appear by rename), or all stored files present."""

        def there(f: FileInfo) -> bool:
            return os.path.exists(safe_join(shard.local, f.basename, source=shard.local, field="basename"))

        return all(there(f) for f in shard.resident_files()) or all(
            there(f) for f in shard.info.stored_files()
        )

    def usage(self) -> int:
        """Bytes of evictable shard files (and their temp files) currently on disk."""
        return self._space.usage()

    def _path(self, k: int, f: FileInfo) -> str:
        return self._paths[k][f.basename]

    def _lock_name(self, k: int) -> str:
        return self.shards[k].info.raw_data.basename

    def _verdict(self, k: int, f: FileInfo, algo: str) -> str:
        return verdict_path(lock_dir(self.shards[k].local), f.basename, algo)

    def _algo(self, k: int) -> str | None:
        shard = self.shards[k]
        return hash_to_check(shard.validate_hash or self.validate_hash, recorded_digests(shard.info))

    def ready(self, shard_id: int) -> bool:
        """Whether shard ``shard_id`` is readable as it is now: its files on disk and verified by this process
        where they are checked (no pin: another job may evict it the next moment)."""
        return self._ready(shard_id) and self._trusted(shard_id)

    def _ready(self, k: int) -> bool:
        return all(os.path.exists(self._path(k, f)) for f in self.shards[k].resident_files())

    def _trusted(self, k: int) -> bool:
        return self._algo(k) is None or k in self._verified

    def pin(self, shard_id: int) -> bool:
        """Keep shard ``shard_id`` on disk until as many ``unpin`` s
        (its use lock, shared: eviction skips it).

        Waits only for an eviction already under way (a few unlinks). Readers use ``acquire``, which cannot
        lose the shard between preparing and pinning it. Pins are per process and counted
        (``streaming.cache.pins``); call from the reading thread.

        Returns:
            False if the shard is not on disk (evicted since it was prepared: prepare it again).
        """
        local, name = self.shards[shard_id].local, use_lock(self._lock_name(shard_id))
        return self._pins.take(shard_id, local=local, lock_name=name, present=lambda: self._ready(shard_id))

    def unpin(self, shard_id: int) -> None:
        """Undo one ``pin`` (or ``acquire``) of shard ``shard_id``;
        after the last, it may be evicted again."""
        self._pins.drop(shard_id)

    def pin_while_alive(self, shard_id: int, owner: object) -> None:
        """One more pin of the pinned shard ``shard_id``, undone when ``owner`` (a ``FileMap`` of its file) is
        garbage (noticed by the next ``pin``, ``unpin`` or ``drain``): the bytes of a file still mapped
        somewhere count against the limit until nothing maps it."""
        self._pins.add_while_alive(shard_id, owner)

    def evict(self, shard_id: int) -> int:
        """Delete shard ``shard_id``'s files now unless it is read (pinned) or prepared, or its only copy is
        local; returns the bytes freed."""
        return self._space.evict(shard_id) if shard_id in self._space.entries else 0

    def publish_demand(self, spans: Mapping[int, tuple[int, int]], read: int) -> None:
        """Tell the other readers of this cache folder which shards this one reads next (shard -> positions of
        its first and last upcoming sample, counted from ``read``, the samples read so far), so their
        evictions keep them (``streaming.cache.demand``); only with a ``cache_limit``."""
        if self.cache_limit is not None:
            entries = self._space.entries
            self._space.demand.publish({k: span for k, span in spans.items() if k in entries}, read)

    def demand_progress(self, read: int) -> None:
        """This reader has read ``read`` samples (moves its published demand along; no system call)."""
        self._space.demand.progress(read)

    def withdraw_demand(self) -> None:
        """This reader reads nothing more for now: delete its demand board."""
        self._space.demand.close()

    def drain(self) -> None:
        """Undo the pins whose owners went (``pin_while_alive``)."""
        self._pins.drain()

    def close(self) -> None:
        """Drop every pin of this process (and close its descriptor of the cache lock)."""
        if hasattr(self, "_pins"):
            self._pins.close()
        if hasattr(self, "_space"):
            self._space.close()

    @contextmanager
    def held_while_prepared(self, shard_id: int) -> Iterator[None]:
        """Hold shard ``shard_id``'s use lock (shared, as a pin) for the ``with`` block, present or not: how a
        reader that reads the shard's file while another thread prepares it (the first sample:
        ``streaming.reader.growing_shard``) keeps it from being evicted before that read closes the file (its
        bytes would be on disk and counted by no one). Nothing to hold for a shard that is never evicted."""
        if shard_id not in self._space.entries or self.cache_limit is None:
            yield
            return
        with file_lock(self.shards[shard_id].local, use_lock(self._lock_name(shard_id)), shared=True):
            yield

    def __del__(self) -> None:
        self.close()

    def prepare(
        self,
        shard_id: int,
        *,
        next_use: Callable[[int], float] | None = None,
        on_full: Callable[[], None] | None = None,
        wait: bool = True,
        on_tmp: Callable[[str], None] | None = None,
    ) -> bool:
        """Make shard ``shard_id`` readable locally (raw files present, verified), without pinning it; waits
        while another thread or process prepares it, or while the cache is full of shards in use.

        ``next_use(k)``: plan position at which shard k is next needed (``inf``: not again), to pick eviction
        victims (default: oldest first). ``on_full``: called once when the cache is full of pinned shards, so
        the caller can drop its own idle pins. ``wait=False`` (a prefetch): return False instead of waiting
        for space, and evict only shards needed later than this one (``next_use``). ``on_tmp``: told the temp
        name of the raw data file if this process writes it (download or decompress).

        Raises:
            CacheTooSmallError: The shard cannot fit (larger than the limit, or no space for ``wait_timeout``
                s).
            HashMismatchError: A cached file of a stream with no remote fails ``validate_hash``.
            FileNotFoundError: A shard of a stream with no remote is missing.
        """
        return self._prepare(
            shard_id,
            pin=False,
            next_use=next_use,
            on_full=on_full,
            patience=None if wait else 0,
            ahead=not wait,
            on_tmp=on_tmp,
        )

    def acquire(
        self,
        shard_id: int,
        *,
        next_use: Callable[[int], float] | None = None,
        on_full: Callable[[], None] | None = None,
    ) -> bool:
        """``prepare`` and ``pin`` shard ``shard_id`` in one step (a reader's way in): the shard is pinned
        before its preparer lets it go, so no eviction comes in between; a shard evicted before this call
        is fetched again.

        Returns:
            True with the shard pinned (until ``unpin``); False, pinning nothing, when the cache stayed full
            of shards in use by readers for ``fallback_after`` s (at once if the previous call also found it
            so): read the shard with ``read_unkept``.

        Raises:
            The errors of ``prepare``.
        """
        wait = None if self.fallback_after is None else 0.0 if self._short_of_space else self.fallback_after
        got = self._prepare(
            shard_id, pin=True, next_use=next_use, on_full=on_full, patience=wait, on_tmp=None
        )
        self._short_of_space = not got
        return got

    def read_unkept(self, shard_id: int) -> dict[str, memoryview]:
        """Shard ``shard_id``'s stored files (raw or compressed) by basename, downloaded into memory and
        verified (``validate_hash``), never written to the cache: how a reader reads a shard when ``acquire``
        found no room under ``cache_limit``. The first such read of this process logs a warning.
        """
        shard, algo = self.shards[shard_id], self._algo(shard_id)
        assert shard.remote is not None, "only evictable shards wait for space"
        if not self.unkept_reads:
            log.warning(
                "cache: no room under cache_limit=%s in %s: every cached shard is in use by a reader (of "
                "this job or another sharing the folder), so shards that do not fit (%s first) are read into "
                "memory without being kept on disk; raise cache_limit to read them from "
                "the cache instead (logged once)",
                format_bytes(self.cache_limit or 0),
                self._root,
                shard.info.raw_data.basename,
            )
        self.unkept_reads += 1
        out = {}
        for f in shard.info.stored_files():
            url = join_url(shard.remote, f.basename)
            with _declared_size(shard, f, url):
                out[f.basename] = download_to_memory(
                    url,
                    policy=shard.policy or self.policy,
                    expected_hashes=f.hashes,
                    validate_hash=algo,
                    max_bytes=f.bytes,
                )
        return out

    def _prepare(
        self,
        k: int,
        *,
        pin: bool,
        next_use: Callable[[int], float] | None,
        on_full: Callable[[], None] | None,
        patience: float | None,
        on_tmp: Callable[[str], None] | None,
        ahead: bool = False,
    ) -> bool:
        """``prepare`` (and, if ``pin``, ``pin``) shard ``k``, following the protocol of the module note;
        False when there was no space within ``patience`` s (``SpaceKeeper.reserve``)."""
        with self._start_lock:
            if not self._started:
                self._started = True
                self._space.start(keep=k)
        shard, name = self.shards[k], self._lock_name(k)
        tracked = shard.evictable and self.cache_limit is not None
        while True:
            # a failed pin: evicted since the look; prepare it again
            if self.ready(k) and (not pin or self.pin(k)):
                return True
            if self._await_preparer(k):
                # someone else prepared it meanwhile (or failed): look again
                continue
            need, targets = self._to_create(k)
            token = None
            with ExitStack() as claim:
                # A prefetch (it never waits for space) claims the shard before reserving: otherwise two
                # jobs fetching it at once both reserve room and evict for it, and the second finds it done
                # (measured: 3 reservations in 10 under cache pressure). A reservation that waits for space
                # does so holding no lock (protocol, 4).
                claimed = tracked and bool(need) and ahead and patience == 0
                if claimed:
                    if not claim.enter_context(try_lock(shard.local, prep_lock(name))):
                        continue  # being prepared: wait for its preparer, then look again
                    need, targets = self._to_create(k)
                    if self._ready(k) or not need:
                        continue  # prepared since the look
                # the one wait on readers: holding no lock but this thread's own pins
                if tracked and need:
                    token = self._space.reserve(
                        k,
                        need,
                        targets,
                        name=name,
                        next_use=next_use,
                        on_full=on_full,
                        patience=patience,
                        ahead=ahead,
                    )
                    if token is None:
                        return False
                on_full = None
                try:
                    if not claimed:
                        claim.enter_context(file_lock(shard.local, prep_lock(name)))
                    if not self._fill(k, reserved=need if tracked else None, on_tmp=on_tmp):
                        # files vanished meanwhile (evicted): reserve again
                        continue
                    # under the prepare lock: no eviction can come first
                    if not pin or self.pin(k):
                        return True
                finally:
                    if token is not None:
                        release_reservation(token)

    def _fill(self, k: int, *, reserved: int | None, on_tmp: Callable[[str], None] | None) -> bool:
        """Holding shard ``k``'s prepare lock: make its files present and verified (a cached file that fails
        ``validate_hash`` is deleted and fetched again). False, doing nothing, when more bytes are missing
        than ``reserved`` (None: no limit)."""
        for path in self._paths[k].values():
            refuse_links(self.shards[k].local, path, doing="prepare shard file")
        bad = self._check(k) if self._ready(k) else []
        for path, _, _ in bad:
            os.remove(path)
        if bad or not self._ready(k):
            self._remove_temps(k)
            if reserved is not None and self._to_create(k)[0] > reserved:
                return False
            self._fetch(k, on_tmp)
        self._verified.add(k)
        return True

    def verify(self, shard_id: int) -> None:
        """Check the files of shard ``shard_id`` present on disk against ``validate_hash`` (no download).

        Raises:
            HashMismatchError: A file does not match its index digest (the message names it and both digests).
        """
        if self._trusted(shard_id):
            return
        self._check(shard_id)
        self._verified.add(shard_id)

    def _await_preparer(self, k: int) -> bool:
        """Wait until no other thread or process holds shard ``k``'s prepare lock; True if it had to wait
        (a preparer waits on no reader, so this wait ends)."""
        local, name = self.shards[k].local, prep_lock(self._lock_name(k))
        with try_lock(local, name) as free:
            if free:
                return False
        # granted once the preparer is done
        with file_lock(local, name, shared=True):
            return True

    def _check(self, k: int) -> list[tuple[str, str, str]]:
        """Hash-check the files of shard ``k`` on disk; returns ``(path, expected, actual)`` per mismatch.

        Raises:
            HashMismatchError: A mismatch when the shard has no remote to download it again from.
        """
        algo = self._algo(k)
        if algo is None:
            return []
        shard = self.shards[k]
        bad = []
        for f in shard.info.files():
            expected, path = f.hashes.get(algo), self._path(k, f)
            if expected is None or not os.path.exists(path):
                continue
            try:
                actual = verify_file(path, self._verdict(k, f, algo), algo, expected)
            except FileNotFoundError:
                # evicted meanwhile
                continue
            if actual is None:
                continue
            if shard.remote is None:
                raise HashMismatchError(
                    f"{path}: {algo} is {actual}, index.json says {expected}; the cached shard file is "
                    "corrupt and its stream has no remote to download it from again; restore the file from a "
                    "good copy or rebuild the dataset (check it with `python -m streaming validate`)"
                )
            log.warning(
                "cache: %s: %s is %s, index.json says %s; downloading it again", path, algo, actual, expected
            )
            bad.append((path, expected, actual))
        return bad

    def _to_create(self, k: int) -> tuple[int, list[str]]:
        """Bytes (from index.json) and paths of the files preparing shard ``k`` will create from here."""
        shard = self.shards[k]

        def missing(f: FileInfo) -> bool:
            return not os.path.exists(self._path(k, f))

        if not any(missing(f) for f in shard.resident_files()):
            return 0, []
        files = [f for f in shard.info.stored_files() if missing(f)]
        if shard.info.zip_data is not None:
            files += [f for f in shard.resident_files() if missing(f) and f not in files]
        return sum(f.bytes for f in files), [self._path(k, f) for f in files]

    def _remove_temps(self, k: int) -> None:
        """Delete temp files of shard ``k`` (called holding its prepare lock: any there belong to a dead
        writer)."""
        for path in self._paths[k].values():
            for stale in glob.glob(glob.escape(path) + ".tmp-*"):
                os.remove(stale)

    def _fetch(self, k: int, on_tmp: Callable[[str], None] | None = None) -> None:
        """Download what is missing, verify, decompress (holding the shard's prepare lock)."""
        shard, algo = self.shards[k], self._algo(k)
        if self._ready(k):
            # only a bad compressed copy was dropped; the raw files passed
            return
        for info in shard.info.stored_files():
            path = self._path(k, info)
            if os.path.exists(path):
                continue
            if shard.remote is None:
                raise FileNotFoundError(
                    f"shard {shard.info.raw_data.basename} is missing from {shard.local} and the stream has "
                    "no remote to download it from"
                )
            url = join_url(shard.remote, info.basename)
            with _declared_size(shard, info, url), self.ranged.lease() as ranged:
                download_file(
                    url,
                    path,
                    policy=shard.policy or self.policy,
                    expected_hashes=info.hashes,
                    validate_hash=algo,
                    on_tmp=on_tmp if info is shard.info.raw_data else None,
                    max_bytes=info.bytes,
                    ranged=ranged,
                )
            self.downloads += 1
            # download_file verified it against the index
            if algo is not None:
                record_verdict(path, self._verdict(k, info, algo), algo, info.hashes[algo])
        if shard.info.zip_data is not None:
            decompress_shard(shard.local, shard.info, on_tmp=on_tmp)
            # the compressed form is only transport once raw is here
            if shard.evictable and not shard.keep_zip:
                for packed in (shard.info.zip_data, shard.info.zip_meta):
                    if packed is not None and os.path.exists(self._path(k, packed)):
                        os.remove(self._path(k, packed))
            # the raw forms, when the index has their digests
            bad = self._check(k)
            if bad:
                path, expected, actual = bad[0]
                raise HashMismatchError(
                    f"{path}: decompressed from a verified file, but its {algo} is {actual} and index.json "
                    f"says {expected}; the index is inconsistent (rebuild it with "
                    "`python -m streaming rebuild-index`)"
                )
