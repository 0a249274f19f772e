"""The pins one process holds on cached shards: counted, and released with the last view of a mapped file.

A pin is a shared ``flock`` on the shard's use lock (``streaming.cache.locks.use_lock``), which eviction only
ever tries (the protocol is in ``streaming.cache.shards``). One descriptor per pinned shard, however many
holders this process has: a ``take`` or ``add_while_alive`` each, undone by a ``drop`` or by the garbage
collection of the owner (a ``streaming.format.reader.FileMap``), so a shard file is never evicted, and its
disk never freed behind the limit's back, while a reader or a sample's array still maps it. Finalizers run in
any thread at any moment, so they only queue their drop; the queue is emptied by the next ``take``, ``drop``
or ``drain``, which the reading thread calls: no lock is needed, and no finalizer can interrupt a change.
"""

from __future__ import annotations

import fcntl
import os
import weakref
from collections import Counter, deque
from collections.abc import Callable

from streaming.cache.locks import open_lock

__all__ = ["Pins"]


class Pins:
    """This process's pins on the shards of one cache, keyed by shard id (see the module note)."""

    def __init__(self) -> None:
        # shard -> descriptor of its use lock, held shared
        self._fds: dict[int, int] = {}
        # shard -> holders not yet dropped
        self._holds: Counter[int] = Counter()
        # holders whose owners went, dropped by the next drain
        self._released: deque[int] = deque()

    def __contains__(self, key: int) -> bool:
        return key in self._fds

    def take(self, key: int, *, local: str, lock_name: str, present: Callable[[], bool]) -> bool:
        """One more holder of shard ``key`` (use lock ``lock_name`` in ``local``); False, holding nothing,
        if ``present()`` says its files are gone once the lock is held.
        Waits only for an eviction under way."""
        self.drain()
        if key in self._fds:
            self._holds[key] += 1
            return True
        fd = open_lock(local, lock_name)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not present():
            os.close(fd)
            return False
        self._fds[key] = fd
        self._holds[key] = 1
        return True

    def add_while_alive(self, key: int, owner: object) -> None:
        """One more holder of the pinned shard ``key``, dropped when ``owner`` is garbage."""
        assert key in self._fds, "take the pin first"
        self._holds[key] += 1
        # only queued: see the module note
        weakref.finalize(owner, self._released.append, key)

    def drop(self, key: int) -> None:
        """Undo one holder of shard ``key``; the last one releases the lock."""
        self.drain()
        self._drop(key)

    def drain(self) -> None:
        """Drop the holders whose owners went."""
        while self._released:
            self._drop(self._released.popleft())

    def _drop(self, key: int) -> None:
        left = self._holds[key] - 1
        if left > 0:
            self._holds[key] = left
            return
        self._holds.pop(key, None)
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Release every pin at once (holders still alive drop nothing later)."""
        fds, self._fds, self._holds = self._fds, {}, Counter()
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                # already closed (interpreter shutdown)
                pass
