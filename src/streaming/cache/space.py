"""Disk accounting for the shard cache: bytes on disk plus in-flight reservations, both read from the disk.

Several processes (ranks, DataLoader workers, other jobs) share one cache folder and must agree on how full
it is, so nothing here is a counter in memory. Usage is the size of every shard file present plus every temp
file (``<name>.tmp-<pid>-<n>``, written by downloads and decompression) of a writer still alive; a temp file
of a dead process (``kill -9``) is removed when seen. A process about to create files first *reserves* their
bytes: a small file in the lock folder (``<lock folder>/reservations/<pid>-<id>.json``) naming its pid, the
bytes and the target paths. A reservation counts only for what its targets do not yet hold on disk, so a
download in progress is not counted twice, and a reservation whose pid is dead is dropped. Callers hold the
cache-wide lock while reading and writing reservations, so a decision made from them cannot race another
process's; the reservations are read before the disk is scanned, so a file renamed into place during the scan
is counted.

Cost. Every thread that reserves takes the cache lock, and a holder that gives up the GIL on each system call
waits for its process's other threads to give it back, so the work under the lock is kept to few system calls
(measured: threads spent ~70% of a reservation waiting for the lock and ~25% holding it, for ~5% of real
work): the threads of one process queue on an in-process lock before the ``flock`` (``SpaceKeeper``: at most
one thread per process waits on or holds the file lock; the lock order is in-process lock, then cache lock,
and nothing is taken under them but the shard locks eviction only tries), the lock file is opened once per
process, reservation files are parsed once (they never change) and each pid probed once per measure, and the
victims' ages come from the scan's own ``stat``. The other readers' demand boards
(``streaming.cache.demand``), which order the victims, are read before the lock is taken.

Limitation: pid liveness is local to this machine and pid namespace, so the cache folder must be node-local
(as the cache design assumes anyway) and not shared between containers with separate pid namespaces.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

# re-exported: the streaming modules' one liveness probe
from stackbase.process import pid_alive
from streaming.cache.demand import DemandBoard
from streaming.cache.locks import file_lock, lock_dir, open_lock, prep_lock, use_lock
from streaming.util.safepath import refuse_links
from streaming.util.sizes import format_bytes

__all__ = [
    "CacheTooSmallError",
    "DiskUsage",
    "Reservation",
    "add_reservation",
    "pending_bytes",
    "pid_alive",
    "read_reservations",
    "release_reservation",
    "group_by_folder",
    "scan_usage",
    "SpaceEntry",
    "SpaceKeeper",
]

log = logging.getLogger("streaming.cache")

RESERVATIONS = "reservations"
_TMP = re.compile(r"^(?P<base>.+)\.tmp-(?P<pid>\d+)-[^/]+$")


class CacheTooSmallError(ValueError):
    """``cache_limit`` is below what the epoch plan
    (or the readers sharing the cache) need resident at once."""


@dataclass(frozen=True)
class DiskUsage:
    """What one scan found: bytes per known file path present, and bytes of live temp files per target path
    (``mtimes``: each present file's modification time, from the same ``stat``)."""

    files: dict[str, int]
    temps: dict[str, int]
    mtimes: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.files.values()) + sum(self.temps.values())

    def held_by(self, paths: Iterable[str]) -> int:
        """Bytes on disk for ``paths``, their temp files included."""
        return sum(self.files.get(p, 0) + self.temps.get(p, 0) for p in paths)


def group_by_folder(paths: Iterable[str]) -> dict[str, frozenset[str]]:
    """``paths`` as folder -> file names (what ``scan_usage`` lists);
    computed once per cache, not per scan."""
    by_dir: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        # str.rpartition is ~2.5x faster than os.path.split (500k shards: 180 vs 450 ms, on the first-sample
        # path); the rare heads it would spell differently ("/a", "a", "a//b") go through os.path.split
        folder, _, name = path.rpartition(os.sep)
        if not folder or folder.endswith(os.sep):
            folder, name = os.path.split(path)
        by_dir[folder].append(name)
    return {folder: frozenset(names) for folder, names in by_dir.items()}


def scan_usage(
    by_dir: Mapping[str, frozenset[str]],
    *,
    remove_dead_temps: bool = True,
    alive: Callable[[int], bool] = pid_alive,
) -> DiskUsage:
    """Sizes of the files the cache may hold that exist, and of the temp files next to them.

    Each folder is listed once (one ``scandir`` per folder, one ``stat`` per file found), so a scan costs what
    is on disk, not the number of shards in the dataset.

    Args:
        by_dir: Every shard file path the cache may hold, grouped by ``group_by_folder``.
        remove_dead_temps: Delete temp files whose writer pid is no longer alive
            (they would never be renamed).
        alive: The liveness probe (a memo of ``pid_alive`` for one measure).
    """
    files: dict[str, int] = {}
    mtimes: dict[str, float] = {}
    temps: dict[str, int] = defaultdict(int)
    for folder, names in by_dir.items():
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            name = entry.name
            match = None if name in names else _TMP.match(name)
            if name not in names and (match is None or match["base"] not in names):
                continue
            path = os.path.join(folder, name)
            try:
                if match is not None and remove_dead_temps and not alive(int(match["pid"])):
                    os.remove(path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                # renamed or evicted since the listing
                continue
            if match is None:
                files[path] = st.st_size
                mtimes[path] = st.st_mtime
            else:
                temps[os.path.join(folder, match["base"])] += st.st_size
    return DiskUsage(files=files, temps=dict(temps), mtimes=mtimes)


@dataclass(frozen=True)
class Reservation:
    """Bytes a live process will create at ``targets``; ``path`` is the reservation file itself."""

    path: str
    pid: int
    nbytes: int
    targets: tuple[str, ...]


def add_reservation(lock_dir: str, nbytes: int, targets: Sequence[str], *, checked: bool = False) -> str:
    """Record a reservation of ``nbytes`` for ``targets`` (call under the cache lock); returns its file path.
    ``checked``: this process already made the reservations folder and found it no link."""
    folder = os.path.join(lock_dir, RESERVATIONS)
    if not checked:
        refuse_links(os.path.dirname(lock_dir), folder, doing="record a cache reservation in")
        os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex}.json")
    tmp = path + ".part"
    try:
        f = open(tmp, "w")
    except FileNotFoundError:
        if not checked:
            raise
        # the folder was removed since (by hand)
        return add_reservation(lock_dir, nbytes, targets)
    with f:
        json.dump({"pid": os.getpid(), "bytes": int(nbytes), "targets": list(targets)}, f)
    os.replace(tmp, path)
    return path


def release_reservation(path: str) -> None:
    """Drop a reservation (its files are complete, or were never created)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _pid_of(name: str) -> int | None:
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def read_reservations(
    lock_dir: str,
    *,
    known: dict[str, Reservation] | None = None,
    alive: Callable[[int], bool] = pid_alive,
) -> list[Reservation]:
    """Every live reservation; those of dead processes (and unreadable leftovers of dead ones) are deleted.

    ``known``: reservations parsed by earlier calls, by file name (a reservation file never changes once
    written, and its name is never reused): read from it instead of the file, and kept up to date.
    """
    folder = os.path.join(lock_dir, RESERVATIONS)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    live: list[Reservation] = []
    for name in names:
        path = os.path.join(folder, name)
        pid = _pid_of(name)
        if pid is None or not alive(pid):
            release_reservation(path)
            continue
        if not name.endswith(".json"):
            # a '.part' being written by a live process
            continue
        if known is not None and name in known:
            live.append(known[name])
            continue
        try:
            with open(path) as f:
                obj = json.load(f)
            live.append(
                Reservation(path=path, pid=pid, nbytes=int(obj["bytes"]), targets=tuple(obj["targets"]))
            )
        except (OSError, ValueError, KeyError, TypeError):
            # released meanwhile, or not ours to judge
            continue
        if known is not None:
            known[name] = live[-1]
    # forget the released ones
    if known is not None:
        for gone in set(known) - set(names):
            del known[gone]
    return live


class _Memo:
    """``pid_alive`` asked once per pid (for one measure: a pid's answer does not change within it that
    matters, as a process that dies meanwhile is dropped at the next measure)."""

    def __init__(self) -> None:
        self._seen: dict[int, bool] = {}

    def __call__(self, pid: int) -> bool:
        got = self._seen.get(pid)
        if got is None:
            got = self._seen[pid] = pid_alive(pid)
        return got


class _CacheLock:
    """The cache-wide lock as one process takes it: its threads queue on an in-process lock, and the one that
    holds it takes the ``flock`` on a descriptor this process opened once. Only the holder of the in-process
    lock touches the descriptor, so sharing it between threads is safe; a forked child opens its own (an
    inherited descriptor would share the parent's lock)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self._fd: int | None = None

    @contextmanager
    def hold(self) -> Iterator[None]:
        # a forked child: nothing of the parent's is ours
        if self._pid != os.getpid():
            self._pid, self._mutex, self._fd = os.getpid(), threading.Lock(), None
        with self._mutex:
            while True:
                if self._fd is None:
                    self._fd = open_lock(self.root, "cache")
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                if os.fstat(self._fd).st_nlink:
                    break
                # the lock file was deleted (its folder removed): others lock a new one
                os.close(self._fd)
                self._fd = None
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            try:
                os.close(fd)
            except OSError:
                # already closed (interpreter shutdown)
                pass


def pending_bytes(reservations: Iterable[Reservation], usage: DiskUsage) -> int:
    """Bytes reserved but not yet on disk: each reservation minus what its targets already hold."""
    return sum(max(0, r.nbytes - usage.held_by(r.targets)) for r in reservations)


@dataclass(frozen=True)
class SpaceEntry:
    """An evictable shard: its folder and lock name, and its files (the raw data file first)."""

    local: str
    lock_name: str
    paths: tuple[str, ...]


class SpaceKeeper:
    """Keeps the evictable shards of one cache under ``limit`` bytes, for every process sharing the folder.

    Args:
        root: The folder whose lock folder holds the cache-wide lock and the reservations.
        entries: Evictable shards by shard id.
        limit: ``cache_limit`` in bytes (None: only usage and start-up clean-up).
        wait_timeout: Seconds ``reserve`` waits for space held by readers before raising.
    """

    def __init__(
        self, root: str, entries: Mapping[int, SpaceEntry], limit: int | None, wait_timeout: float
    ) -> None:
        self.root = root
        self.entries = dict(entries)
        self.limit = limit
        self.wait_timeout = wait_timeout
        self._lock_dir = lock_dir(root)
        self._by_dir = group_by_folder(p for e in self.entries.values() for p in e.paths)
        # file -> its shard
        self._owner = {p: k for k, e in self.entries.items() for p in e.paths}
        self._lock = _CacheLock(root)
        # reservation files parsed (under the cache lock)
        self._known: dict[str, Reservation] = {}
        # the reservations folder exists and is no link (under the cache lock)
        self._checked = False
        # what the other readers sharing the folder will read next (streaming.cache.demand)
        self.demand = DemandBoard(self._lock_dir)

    def close(self) -> None:
        """Close this process's descriptor of the cache lock (taken again, reopened, if used after) and delete
        its demand board."""
        self._lock.close()
        self.demand.close()

    def usage(self) -> int:
        """Bytes of shard files and their temp files on disk now."""
        return scan_usage(self._by_dir, remove_dead_temps=False).total

    def _measure(self) -> tuple[DiskUsage, int]:
        """What is on disk, and the bytes used or reserved (call under the cache lock).

        The reservations are read before the disk is scanned: a preparer may rename its temp file into place
        and then release its reservation while the scan runs, so a scan that lists the temp name and then
        finds it gone sees neither file; the reservation read first still counts those bytes. The other order
        undercounted by one shard now and then (and granted one shard too many).
        """
        alive = _Memo()
        reservations = read_reservations(self._lock_dir, known=self._known, alive=alive)
        usage = scan_usage(self._by_dir, alive=alive)
        return usage, usage.total + pending_bytes(reservations, usage)

    def start(self, *, keep: int | None = None) -> None:
        """Drop dead writers' temp files and reservations; evict a cache left over the limit back under it
        (sparing shard ``keep``, about to be used, if it can)."""
        if not self.entries:
            return
        with self._lock.hold():
            usage, used = self._measure()
            if self.limit is not None and used > self.limit:
                freed = self._evict_down(used - self.limit, usage, exclude=keep, next_use=None)
                log.warning(
                    "cache: %s in use was over cache_limit=%s (left by a crashed run?); evicted %s",
                    format_bytes(used),
                    format_bytes(self.limit),
                    format_bytes(freed),
                )

    def reserve(
        self,
        k: int,
        need: int,
        targets: Sequence[str],
        *,
        name: str,
        next_use: Callable[[int], float] | None = None,
        on_full: Callable[[], None] | None = None,
        patience: float | None = None,
        ahead: bool = False,
    ) -> str | None:
        """Reserve ``need`` bytes for the files ``targets`` of shard ``k`` (``name``), evicting idle shards.

        Waits while the space is held by readers (calling ``on_full`` once first): for ``patience`` seconds,
        then returns None (0: do not wait); with ``patience=None``, for ``wait_timeout`` seconds, then raises.
        ``ahead``: shard ``k`` is prepared ahead of use (a prefetch), so only shards needed later than it
        (``next_use``) are evicted for it. Returns the token for ``release_reservation``.

        Raises:
            CacheTooSmallError: ``need`` exceeds the limit, or (``patience=None``) the space stayed in use for
                ``wait_timeout`` s.
        """
        limit = self.limit
        assert limit is not None
        if need > limit:
            raise CacheTooSmallError(
                f"shard {name} needs {need} bytes on disk while it is prepared, more than "
                f"cache_limit={limit} bytes ({format_bytes(limit)}); raise cache_limit well above "
                f"{format_bytes(need)} (several shards' worth) or write smaller shards"
            )
        start = last_note = time.monotonic()
        delay = 0.005
        while True:
            # advice, read before the cache lock: its system calls would lengthen every holder's turn
            others = self.demand.others()
            with self._lock.hold():
                usage, used = self._measure()
                if used + need > limit:
                    horizon = next_use(k) if ahead and next_use is not None else math.inf
                    used -= self._evict_down(
                        used + need - limit,
                        usage,
                        exclude=k,
                        next_use=next_use,
                        horizon=horizon,
                        others=others,
                    )
                if used + need <= limit:
                    token = add_reservation(self._lock_dir, need, targets, checked=self._checked)
                    self._checked = True
                    return token
            if on_full is not None and patience != 0:
                on_full()
                on_full = None
                continue
            now = time.monotonic()
            if patience is not None and now - start >= patience:
                return None
            if patience is None and now - start > self.wait_timeout:
                raise CacheTooSmallError(
                    f"cache_limit={limit} bytes ({format_bytes(limit)}) cannot fit shard {name} ({need} "
                    f"bytes): for {self.wait_timeout:.0f} s every other cached shard stayed in use by a "
                    f"reader or being downloaded ({format_bytes(used)} used or reserved in {self.root}); "
                    "raise cache_limit (room for every reader's current and next shards), or run fewer "
                    "readers or a smaller predownload"
                )
            if now - last_note > 30:
                log.warning("cache: full (%s); waiting for readers to release shards", format_bytes(used))
                last_note = now
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _evict_down(
        self,
        excess: int,
        usage: DiskUsage,
        *,
        exclude: int | None,
        next_use: Callable[[int], float] | None,
        horizon: float = math.inf,
        others: Mapping[int, int] | None = None,
    ) -> int:
        """Evict idle shards (under the cache lock) until ``excess`` bytes are freed; returns bytes freed.

        Farthest next use first, by this reader's plan (``next_use``) and every other reader's demand board
        (``others``, read by ``streaming.cache.demand``): a shard another job is about to open is kept over
        one nobody needs. With a finite ``horizon`` (the next use of a shard prepared ahead), only shards
        needed by no one before it: a prefetch never evicts what a reader needs first (it gives up
        instead)."""
        # the shards with files on disk (what the scan found, not every shard of the dataset)
        held = {self._owner[p] for p in (*usage.files, *usage.temps) if p in self._owner}
        candidates = [k for k in sorted(held) if k != exclude]
        # oldest first; the sort by next use below is stable, so among shards needed equally late the oldest
        # still go first
        candidates.sort(key=lambda k: usage.mtimes.get(self.entries[k].paths[0], 0.0))
        others = others or {}
        if next_use is not None or others:
            own = next_use or (lambda k: math.inf)
            uses = {k: min(own(k), others.get(k, math.inf)) for k in candidates}
            if math.isfinite(horizon):
                candidates = [k for k in candidates if uses[k] > horizon]
            candidates.sort(key=uses.__getitem__, reverse=True)
        freed = 0
        for victim in candidates:
            if freed >= excess:
                break
            freed += self.evict(victim)
        return freed

    def evict(self, k: int) -> int:
        """Delete shard ``k``'s files unless someone reads (pins) or prepares it; returns bytes freed."""
        entry = self.entries[k]
        # Never wait for a shard lock (the cache lock may be held): a busy shard is skipped. The prepare lock
        # first, as everyone takes them: its holder may pin the shard, and finds the use lock free.
        with file_lock(entry.local, prep_lock(entry.lock_name), blocking=False) as idle:
            if not idle:
                return 0
            with file_lock(entry.local, use_lock(entry.lock_name), blocking=False) as unpinned:
                if not unpinned:
                    return 0
                freed = _delete(entry.local, entry.paths)
        log.debug("cache: evicted %s (%s)", entry.lock_name, format_bytes(freed))
        return freed


def _delete(root: str, paths: Iterable[str]) -> int:
    """Remove the files at ``paths`` (under ``root``, reached through no link) that exist;
    returns their bytes."""
    freed = 0
    for path in paths:
        refuse_links(root, os.path.dirname(path), doing="evict shard file")
        try:
            size = os.lstat(path).st_size
            os.remove(path)
            freed += size
        except FileNotFoundError:
            pass
    return freed
