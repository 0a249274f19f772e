"""File locks of the shard cache: ``fcntl.flock`` on ``<folder>/.locks/<name>.lock``.

The kernel drops a flock when its process dies (even by ``kill -9``), so no lock outlives its holder and
nothing needs cleaning after a crash. Each ``open`` is its own lock owner, so two threads of one process
exclude each other exactly as two processes do. Lock files are opened without following links, and a
``.locks`` that is a link is refused (``streaming.safepath.refuse_links``). Each evictable shard has two locks (``use_lock`` and
``prep_lock`` name them; the protocol is in ``streaming.cache.shards``).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from streaming.safepath import refuse_links

__all__ = ["LOCK_DIR", "file_lock", "open_lock", "prep_lock", "try_lock", "use_lock"]

LOCK_DIR = ".locks"


def use_lock(shard: str) -> str:
    """The lock name readers of shard file ``shard`` hold shared (a pin) and eviction takes exclusively."""
    return shard


def prep_lock(shard: str) -> str:
    """The lock name held exclusively by whoever changes shard ``shard``'s files (prepare, verify, evict)."""
    return shard + ".prep"


def open_lock(directory: str, name: str) -> int:
    """Open (creating it and its folder) the lock file of ``name`` in ``directory``; returns the descriptor."""
    lock_dir = os.path.join(directory, LOCK_DIR)
    path = os.path.join(lock_dir, name.replace("/", "__") + ".lock")
    refuse_links(directory, path, doing="open lock file")
    os.makedirs(lock_dir, exist_ok=True)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a link planted since the check
            refuse_links(directory, path, doing="open lock file")
        raise


@contextmanager
def file_lock(directory: str, name: str, *, blocking: bool = True, shared: bool = False) -> Iterator[bool]:
    """Hold the lock of ``name`` (exclusive unless ``shared``); yields False if not ``blocking`` and taken."""
    fd = open_lock(directory, name)
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode if blocking else mode | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True  # closing the descriptor releases the lock
    finally:
        os.close(fd)


@contextmanager
def try_lock(directory: str, name: str) -> Iterator[bool]:
    """The exclusive lock of ``name`` if free at once; False if taken or if the lock folder is not writable."""
    try:
        fd = open_lock(directory, name)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
