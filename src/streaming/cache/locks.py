"""File locks of the shard cache: ``fcntl.flock`` on ``<lock folder>/<name>.lock``, outside the cache folder.

The lock folder of cache folder ``local`` (``lock_dir``) is its hidden sibling ``.<name>.locks`` next to the
real path of ``local`` (links resolved), so the cache folder holds exactly the dataset's files (its listing
equals the remote's, as mosaicml-streaming's) and every job sharing one ``local``, by whatever path, finds the
same locks. Where that sibling cannot be created (the parent folder is read-only or not ours) or already
exists owned by another user than us and the cache folder's owner (a shared parent such as ``/tmp``), the lock
folder is ``streaming-locks/<sha256 of the real path>`` under the per-user runtime folder
(``$XDG_RUNTIME_DIR``, else ``<tmp>/streaming-locks-<uid>``): still one folder per cache folder, shared by
that user's jobs on this host. The lock folder also holds the cache's small bookkeeping files (source marker,
hash verdicts, reservations, demand boards).

The kernel drops a flock when its process dies (even by ``kill -9``), so no lock outlives its holder and
nothing needs cleaning after a crash. Each ``open`` is its own lock owner, so two threads of one process
exclude each other exactly as two processes do. Lock files are opened without following links, and a
lock folder that is a link is refused (``streaming.util.safepath.refuse_links``). Each evictable shard has two
locks (``use_lock`` and ``prep_lock`` name them; the protocol is in ``streaming.cache.shards``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from streaming.util.safepath import refuse_links

__all__ = ["file_lock", "lock_dir", "open_lock", "prep_lock", "try_lock", "use_lock"]

_NOT_OURS = (errno.EACCES, errno.EPERM, errno.EROFS)


def _runtime_lock_dir(real: str) -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        runtime
        if runtime and os.path.isdir(runtime)
        else os.path.join(tempfile.gettempdir(), f"streaming-locks-{os.getuid()}")
    )
    return os.path.join(base, "streaming-locks", hashlib.sha256(real.encode()).hexdigest()[:32])


def _owned_here(folder: str, cache: str) -> bool:
    """Whether ``folder`` belongs to this user or to the cache folder's owner: a lock folder someone else made
    beside the cache (in a shared parent such as ``/tmp``) could hold forged hash verdicts or reservations."""
    owner = os.stat(folder).st_uid
    return owner == os.geteuid() or (os.path.exists(cache) and owner == os.stat(cache).st_uid)


_RESOLVED: dict[str, tuple[str, int, int]] = {}
"""Lock folders this process has resolved: cache folder as given -> (lock folder, ``st_dev``, ``st_ino``).
A memo, not state: ``lock_dir`` checks with one ``lstat`` that the path still names that same folder (not a
link, not a folder made anew) and resolves it again otherwise. Resolving took ~70 us (the real path, the link
check, ``makedirs``, the owner) on every lock a shard's preparation, pin or eviction takes. A cache folder's
path is resolved once per process while its lock folder stays (as the path of ``local`` is when a dataset
starts)."""


def lock_dir(directory: str) -> str:
    """The lock folder of cache folder ``directory`` (outside it; see the module note), created if missing."""
    known = _RESOLVED.get(directory)
    if known is not None:
        try:
            st = os.lstat(known[0])
        except OSError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == known[1:]:
                return known[0]
    folder = _resolve_lock_dir(directory)
    st = os.lstat(folder)
    _RESOLVED[directory] = (folder, st.st_dev, st.st_ino)
    return folder


def _resolve_lock_dir(directory: str) -> str:
    real = os.path.realpath(directory)
    parent, name = os.path.split(real)
    if name:
        sibling = os.path.join(parent, f".{name}.locks")
        refuse_links(parent, sibling, doing="use lock folder")
        try:
            os.makedirs(sibling, exist_ok=True)
            if _owned_here(sibling, real):
                return sibling
        except OSError as err:
            if err.errno not in _NOT_OURS:
                raise
    fallback = _runtime_lock_dir(real)
    refuse_links(os.path.dirname(os.path.dirname(fallback)), fallback, doing="use lock folder")
    os.makedirs(fallback, mode=0o700, exist_ok=True)
    return fallback


def use_lock(shard: str) -> str:
    """The lock name readers of shard file ``shard`` hold shared (a pin) and eviction takes exclusively."""
    return shard


def prep_lock(shard: str) -> str:
    """The lock name held exclusively by whoever changes shard ``shard``'s files (prepare, verify, evict)."""
    return shard + ".prep"


def open_lock(directory: str, name: str) -> int:
    """Open (creating it and its folder) the lock file of ``name`` in ``directory``;
    returns the descriptor."""
    folder = lock_dir(directory)
    path = os.path.join(folder, name.replace("/", "__") + ".lock")
    refuse_links(folder, path, doing="open lock file")
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as err:
        # a link planted since the check
        if err.errno == errno.ELOOP:
            refuse_links(folder, path, doing="open lock file")
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
        # closing the descriptor releases the lock
        yield True
    finally:
        os.close(fd)


@contextmanager
def try_lock(directory: str, name: str) -> Iterator[bool]:
    """The exclusive lock of ``name`` if free at once;
    False if taken or if the lock folder is not writable."""
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
