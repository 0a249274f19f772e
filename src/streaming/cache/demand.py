"""What the readers sharing a cache read next: each publishes its upcoming shards, eviction reads them all.

Several jobs (and each job's ranks and DataLoader workers) stream through one cache folder in different
orders. When a reservation must evict, the best victim is the shard whose next use by *any* reader is the
farthest (Belady's rule); a reader that knows only its own plan evicts shards that another job is about to
open, and that job downloads them again. So every reader with a ``cache_limit`` publishes its *demand*: the
shards of its next chunks with, for each, how many of its samples come before that shard's first one
(``DemandBoard.publish``, at each chunk). Eviction (``SpaceKeeper``) merges the others' boards with the
reader's own plan: a shard's next use is the smallest position any reader gave it. Positions count samples,
so boards of jobs at similar speeds compare; a board is at most one chunk stale.

Files. One file per reader, ``<lock folder>/demand/<pid>-<token>.json``: ``{"uses": [shard, position, ...]}``,
at most ``MAX_SHARDS`` pairs, written to a temp name and renamed (a reader never sees half a file; no lock is
needed: a board is advice, a stale or missing one only makes eviction less informed). A board is parsed again
only when its modification time or size changed. A board whose pid is dead is deleted by whoever reads it;
a reader deletes its own on ``close``. A board that cannot be parsed (or is over ``MAX_BYTES``) is skipped:
the lock folder is this user's (``streaming.cache.locks``), but nothing read from it is trusted to be well
formed.

Concurrency: a ``DemandBoard`` is used by one process; publishing takes no lock (one writer per file, an
atomic rename), reading happens under the caller's cache lock but waits for nothing, so it adds no wait to the
protocol of ``streaming.cache.shards``. A forked child publishes under its own pid and token.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping

from stackbase.process import pid_alive
from streaming.util.safepath import refuse_links

__all__ = ["DEMAND", "MAX_SHARDS", "DemandBoard", "merge_demand"]

DEMAND = "demand"
"""The folder of the boards, in the cache's lock folder."""

MAX_SHARDS = 512
"""Shards one board names at most (the nearest first)."""

MAX_BYTES = 64 * 1024
"""A board larger than this is not read (``MAX_SHARDS`` pairs take under 16 KiB)."""


def merge_demand(boards: Mapping[str, Mapping[int, int]]) -> dict[int, int]:
    """Each shard's nearest use over ``boards`` (board name -> shard -> position)."""
    merged: dict[int, int] = {}
    for uses in boards.values():
        for shard, position in uses.items():
            if position < merged.get(shard, position + 1):
                merged[shard] = position
    return merged


def _parse(raw: bytes) -> dict[int, int] | None:
    """A board's ``shard -> position``, or None when it is not one."""
    try:
        flat = json.loads(raw)["uses"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(flat, list) or len(flat) % 2 or len(flat) > 2 * MAX_SHARDS:
        return None
    if not all(type(x) is int and x >= 0 for x in flat):
        return None
    return dict(zip(flat[0::2], flat[1::2]))


class DemandBoard:
    """This process's demand board in cache lock folder ``lock_dir``, and its view of everyone else's."""

    def __init__(self, lock_dir: str) -> None:
        self.folder = os.path.join(lock_dir, DEMAND)
        self._lock_dir = lock_dir
        self._pid = -1
        self._name = ""
        self._published = False
        # other boards parsed: name -> ((mtime_ns, size), shard -> position)
        self._seen: dict[str, tuple[tuple[int, int], dict[int, int]]] = {}

    def _own_name(self) -> str:
        if self._pid != os.getpid():
            # a forked child: the parent's board is not ours
            self._pid, self._published, self._seen = os.getpid(), False, {}
            self._name = f"{self._pid}-{uuid.uuid4().hex}.json"
        return self._name

    def publish(self, uses: Mapping[int, int]) -> None:
        """Publish ``uses`` (shard -> samples before its first use) as this process's board: the
        ``MAX_SHARDS`` nearest. Best effort: a board that cannot be written only makes eviction less
        informed."""
        name = self._own_name()
        nearest = sorted(uses.items(), key=lambda item: item[1])[:MAX_SHARDS]
        flat = [int(x) for pair in nearest for x in pair]
        path = os.path.join(self.folder, name)
        tmp = f"{path}.part"
        try:
            if not self._published:
                parent = os.path.dirname(self._lock_dir)
                refuse_links(parent, self.folder, doing="publish a cache demand board in")
                os.makedirs(self.folder, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump({"uses": flat}, f, separators=(",", ":"))
            os.replace(tmp, path)
            self._published = True
        except OSError:
            return

    def others(self, alive: Callable[[int], bool] = pid_alive) -> dict[int, int]:
        """Each shard's nearest use on the other live boards (deleting the boards of dead processes)."""
        own = self._own_name()
        try:
            names = os.listdir(self.folder)
        except OSError:
            return {}
        boards: dict[str, dict[int, int]] = {}
        for name in names:
            if name == own or not name.endswith(".json"):
                continue
            head = name.split("-", 1)[0]
            path = os.path.join(self.folder, name)
            if not head.isdigit() or not alive(int(head)):
                _remove(path)
                continue
            got = self._read(name, path)
            if got is not None:
                boards[name] = got
        for gone in set(self._seen) - set(names):
            del self._seen[gone]
        return merge_demand(boards)

    def _read(self, name: str, path: str) -> dict[int, int] | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            stamp = (st.st_mtime_ns, st.st_size)
            seen = self._seen.get(name)
            if seen is not None and seen[0] == stamp:
                return seen[1]
            if st.st_size > MAX_BYTES:
                return None
            uses = _parse(f.read(MAX_BYTES + 1))
        if uses is not None:
            self._seen[name] = (stamp, uses)
        return uses

    def close(self) -> None:
        """Delete this process's board (it reads no more)."""
        if self._published and self._pid == os.getpid():
            _remove(os.path.join(self.folder, self._name))
            self._published = False


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
