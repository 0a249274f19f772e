"""What the readers sharing a cache read next: each publishes its upcoming shards, eviction reads them all.

Several jobs (and each job's ranks and DataLoader workers) stream through one cache folder in different
orders. When a reservation must evict, the best victim is the shard whose next use by *any* reader is the
farthest (Belady's rule); a reader that knows only its own plan evicts shards that another job is about to
open, and that job downloads them again. So every reader with a ``cache_limit`` publishes its *demand*: for
each shard of its next samples, the positions of its first and last sample there, counted in samples from
what the reader had read when it published (``DemandBoard.publish``, every few hundred samples), and, at every
chunk, how many samples it has read since (``DemandBoard.progress``: a store into a shared memory map, no
system call). A reader evicting (``SpaceKeeper``) merges the others' boards, each shifted by its reader's
progress (a shard whose last listed sample is behind its reader is dropped: a board never claims shards
already read), with its own plan: a shard's next use is the smallest position any reader gives it. Positions
count samples, so boards of jobs at similar speeds compare.

Files. Per reader, in ``<lock folder>/demand/``: ``<pid>-<token>.json``, ``{"base": read, "uses": [shard,
first, last, ...], "version": n}`` for at most ``MAX_SHARDS`` shards (the nearest), then a newline and the
CRC-32 of that text (8 hex digits), written in place (one ``pwrite`` at 0, then truncated to its length; a
create and a rename into the folder cost ~0.25 ms a publish, most of it the rename): a reader that reads it
mid-write finds the check wrong and keeps the board it had (``parse_board``); and ``<pid>-<token>.pos``, 16
bytes (samples read, then the version of the board last published; little-endian; 0: none), mapped by its
writer. No lock is needed: one writer per file, and a board is advice (a stale, torn or missing one makes
eviction less informed, never wrong about what is on disk). A follower keeps each other reader's ``.pos`` open
and reads its 16 bytes at each eviction (one system call), the board only when its version changed, and lists
the folder again when a reader came or went (``roster``: a reader appends one byte to it when it starts
publishing and when it stops, so one ``stat`` of its size tells; a publish does not), and at least every
``RELIST_S`` (the files of a dead pid are deleted then). A reader that stops zeroes its ``.pos`` and deletes
both files (``close``). A board that cannot be parsed (or is over ``MAX_BYTES``) is skipped: the lock folder
is this user's (``streaming.cache.locks``), but nothing read from it is trusted to be well formed.

Concurrency: a ``DemandBoard`` is used by one process; publishing takes no lock (one writer per file, checked
contents), and readers read the boards before taking the cache lock, so this adds no wait to the
protocol of ``streaming.cache.shards``. A forked child publishes under its own pid and token.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import stat
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from stackbase.process import pid_alive
from streaming.util.safepath import refuse_links

__all__ = [
    "DEMAND",
    "MAX_SHARDS",
    "ROSTER",
    "Board",
    "DemandBoard",
    "board_bytes",
    "merge_demand",
    "parse_board",
    "shifted",
]

DEMAND = "demand"
"""The folder of the boards, in the cache's lock folder."""

MAX_SHARDS = 512
"""Shards one board names at most (the nearest first)."""

MAX_BYTES = 64 * 1024
"""A board larger than this is not read (``MAX_SHARDS`` pairs take under 16 KiB)."""

RELIST_S = 1.0
"""The folder of boards is listed again when a reader came or went (``ROSTER``), and at least this often (a
reader that died without a word)."""

ROSTER = "roster"
"""In the folder of boards: one byte appended by each reader when it starts publishing and when it stops, so
its size changes exactly when the readers do (its modification time would not within one tick of the clock;
the folder's changes at every publish, and relisting it at every eviction cost ~0.2 ms)."""


def merge_demand(boards: Mapping[str, Mapping[int, int]]) -> dict[int, int]:
    """Each shard's nearest use over ``boards`` (board name -> shard -> position)."""
    merged: dict[int, int] = {}
    for uses in boards.values():
        for shard, position in uses.items():
            if position < merged.get(shard, position + 1):
                merged[shard] = position
    return merged


def shifted(uses: Sequence[tuple[int, int, int]], behind: int) -> dict[int, int]:
    """A board's ``(shard, first, last)`` positions once its reader has read ``behind`` more samples: each
    shard's next position from there, without the shards whose last listed sample is behind."""
    out: dict[int, int] = {}
    for shard, first, last in uses:
        if last >= behind:
            position = max(0, first - behind)
            out[shard] = min(position, out.get(shard, position))
    return out


@dataclass(frozen=True)
class Board:
    """A parsed board: samples its reader had read when publishing, ``(shard, first, last)`` positions, and
    the board's version (the writer's publish count)."""

    base: int
    uses: tuple[tuple[int, int, int], ...]
    version: int = 0


def board_bytes(base: int, flat: Sequence[int], version: int) -> bytes:
    """A board file's content: its JSON text, a newline, the CRC-32 of the text in 8 hex digits."""
    text = json.dumps({"base": base, "uses": list(flat), "version": version}, separators=(",", ":")).encode()
    return b"%s\n%08x" % (text, zlib.crc32(text))


def parse_board(raw: bytes) -> Board | None:
    """A board file's content, or None when it is not one (a check that does not match: read mid-write)."""
    text, newline, check = raw.rpartition(b"\n")
    if newline:  # with its check (an older writer's board, renamed into place whole, has none)
        if len(check) != 8 or check.strip(b"0123456789abcdef") or int(check, 16) != zlib.crc32(text):
            return None
        raw = text
    try:
        obj = json.loads(raw)
        base, flat, version = obj["base"], obj["uses"], obj.get("version", 0)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if type(base) is not int or type(version) is not int or base < 0 or not isinstance(flat, list):
        return None
    if len(flat) % 3 or len(flat) > 3 * MAX_SHARDS or not all(type(x) is int and x >= 0 for x in flat):
        return None
    uses = tuple(zip(flat[0::3], flat[1::3], flat[2::3]))
    if any(first > last for _, first, last in uses):
        return None
    return Board(base, uses, version)


_FILE = re.compile(r"^(?P<stem>(?P<pid>\d+)-[0-9a-f]{32})\.(?P<suffix>json|pos|part)$")
"""The names of a reader's files (``<pid>-<token>`` and a suffix); nothing else in the folder is touched."""

_POS = struct.Struct("<QQ")
"""A ``.pos`` file: samples read, then the version of the board last published."""


@dataclass
class _Other:
    """Another reader's files as this process follows them: its ``.pos`` descriptor and its board."""

    fd: int
    board: Board | None = None


class DemandBoard:
    """This process's demand board in cache lock folder ``lock_dir``, and its view of everyone else's."""

    def __init__(self, lock_dir: str) -> None:
        self.folder = os.path.join(lock_dir, DEMAND)
        self._lock_dir = lock_dir
        self._pid = -1
        self._name = ""
        self._published = 0  # boards published (the version of the last one)
        self._progress: mmap.mmap | None = None
        self._board_fd = -1  # this process's board file, written in place
        # the other readers by file stem, and when (time.monotonic) the folder was last listed
        self._others: dict[str, _Other] = {}
        self._listed_at = -float("inf")
        self._listed_stamp = -1  # the folder's modification time at that listing

    def _own_name(self) -> str:
        """This process's board name, without its suffix (a forked child takes a new one)."""
        if self._pid != os.getpid():
            for other in self._others.values():
                _close(other.fd)
            self._pid, self._published, self._progress, self._others = os.getpid(), 0, None, {}
            self._board_fd = -1  # the parent's (not closed here: the parent writes it)
            self._listed_at = -float("inf")
            self._name = f"{self._pid}-{uuid.uuid4().hex}"
        return self._name

    def publish(self, spans: Mapping[int, tuple[int, int]], read: int) -> None:
        """Publish ``spans`` (shard -> positions of its first and last upcoming sample, counted from ``read``,
        the samples this reader has read) as this process's board: the ``MAX_SHARDS`` nearest. Best effort:
        a board that cannot be written only makes eviction less informed.

        Raises:
            UnsafePathError: The board folder is a symbolic link (as for a reservation).
        """
        path = os.path.join(self.folder, self._own_name())
        nearest = sorted(spans.items(), key=lambda item: item[1][0])[:MAX_SHARDS]
        flat = [int(x) for shard, (first, last) in nearest for x in (shard, first, last)]
        try:
            if self._progress is None:
                parent = os.path.dirname(self._lock_dir)
                refuse_links(parent, self.folder, doing="publish a cache demand board in")
                os.makedirs(self.folder, exist_ok=True)
                fd = os.open(f"{path}.pos", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.ftruncate(fd, _POS.size)
                    self._progress = mmap.mmap(fd, _POS.size)
                finally:
                    os.close(fd)
                self._board_fd = os.open(f"{path}.json", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                self._announce()
            version = self._published + 1
            raw = board_bytes(int(read), flat, version)
            os.pwrite(self._board_fd, raw, 0)  # one write of the whole content
            os.ftruncate(self._board_fd, len(raw))
            self._published = version
            _POS.pack_into(self._progress, 0, int(read), version)
        except OSError:
            return

    def progress(self, read: int) -> None:
        """Record that this reader has read ``read`` samples (a store into the mapped ``.pos`` file)."""
        if self._progress is not None and self._pid == os.getpid():
            struct.pack_into("<Q", self._progress, 0, read)

    def others(self, alive: Callable[[int], bool] = pid_alive, *, relist: float = RELIST_S) -> dict[int, int]:
        """Each shard's nearest use on the other live boards, from where their readers are now. The folder is
        listed again (and the files of dead processes deleted) when a reader came or went since the last
        listing (``ROSTER``) or that listing is ``relist`` seconds old; in between, each known reader costs
        one ``pread`` of its progress, and its board is read again only when it published a new one."""
        own = self._own_name()
        now = time.monotonic()
        try:
            stamp = os.lstat(os.path.join(self.folder, ROSTER)).st_size
        except OSError:
            stamp = -1
        if stamp != self._listed_stamp or now - self._listed_at >= relist:
            self._listed_at, self._listed_stamp = now, stamp
            self._relist(own, alive)
        boards: dict[str, dict[int, int]] = {}
        for stem, other in self._others.items():
            try:
                raw = os.pread(other.fd, _POS.size, 0)
            except OSError:
                continue
            if len(raw) != _POS.size:
                continue
            read, version = _POS.unpack(raw)
            if not version:
                continue  # nothing published, or withdrawn
            if other.board is None or other.board.version != version:
                other.board = self._read(os.path.join(self.folder, f"{stem}.json")) or other.board
            if other.board is not None:
                boards[stem] = shifted(other.board.uses, max(0, read - other.board.base))
        return merge_demand(boards)

    def _relist(self, own: str, alive: Callable[[int], bool]) -> None:
        """List the folder: follow new readers' ``.pos`` files, forget gone ones, delete dead ones' files
        (only files named as boards are, and only in a folder that is no link)."""
        try:
            if stat.S_ISLNK(os.lstat(self.folder).st_mode):
                return
            names = os.listdir(self.folder)
        except OSError:
            names = []
        live: set[str] = set()
        for name in names:
            match = _FILE.match(name)
            if match is None:
                continue
            stem = match["stem"]
            if not alive(int(match["pid"])):
                _remove(os.path.join(self.folder, name))
                continue
            if stem != own and match["suffix"] == "pos":
                live.add(stem)
        for stem in set(self._others) - live:
            _close(self._others.pop(stem).fd)
        for stem in live - set(self._others):
            try:
                fd = os.open(os.path.join(self.folder, f"{stem}.pos"), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            self._others[stem] = _Other(fd)

    def _announce(self) -> None:
        """Tell the other readers to list the folder again (a reader came or went): one byte onto ``ROSTER``.
        Best effort, as a board is."""
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
            fd = os.open(os.path.join(self.folder, ROSTER), flags, 0o600)
        except OSError:
            return
        try:
            os.write(fd, b".")
        except OSError:
            pass
        finally:
            os.close(fd)

    @staticmethod
    def _read(path: str) -> Board | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_BYTES:
                return None
            return parse_board(f.read(MAX_BYTES + 1))

    def close(self) -> None:
        """Delete this process's board (it reads no more) and stop following the others."""
        if self._pid != os.getpid():
            return
        if self._progress is not None:
            _POS.pack_into(self._progress, 0, 0, 0)
            self._progress.close()
            self._progress = None
            _close(self._board_fd)
            self._board_fd = -1
            for suffix in ("json", "pos"):
                _remove(os.path.join(self.folder, f"{self._name}.{suffix}"))
            self._announce()
        for other in self._others.values():
            _close(other.fd)
        self._others, self._listed_at = {}, -float("inf")


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
