"""Hash checks of shard files already in the cache, with the verdict remembered on disk.

A file that passed a check is remembered by a small verdict file in the cache's lock folder
(``<lock folder>/<name>.<algo>.verdict``) holding the file's size, inode, ``mtime_ns``, the algorithm and the
digest it matched. A later check (this or another process) trusts the verdict only while all of those still
match, so a file rewritten or modified in place (its mtime changes) is hashed again, while an untouched file
is hashed once, not on every open. Verdicts are a cache of work done: losing one costs one re-hash, and a
folder where they cannot be written (read-only) simply re-hashes per process.
"""

from __future__ import annotations

import json
import logging
import os

from streaming.format import hashing

__all__ = ["forget_verdict", "record_verdict", "verdict_path", "verify_file"]

log = logging.getLogger("streaming.cache")


def verdict_path(lock_dir: str, basename: str, algo: str) -> str:
    """Where the verdict of shard file ``basename`` under ``algo`` lives."""
    return os.path.join(lock_dir, f"{basename.replace('/', '__')}.{algo}.verdict")


def _fingerprint(st: os.stat_result, algo: str, digest: str) -> dict[str, object]:
    return {"size": st.st_size, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "algo": algo, "digest": digest}


def record_verdict(
    path: str, verdict: str, algo: str, digest: str, *, st: os.stat_result | None = None
) -> None:
    """Remember that the file at ``path`` has ``digest`` under ``algo`` (best effort).

    ``st``: the file's stat taken *before* it was hashed (default: now), so a change during hashing voids it.
    """
    try:
        st = st or os.stat(path)
        os.makedirs(os.path.dirname(verdict), exist_ok=True)
        tmp = f"{verdict}.part-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(_fingerprint(st, algo, digest), f)
        os.replace(tmp, verdict)
    except OSError as err:
        log.debug("cache: cannot record hash verdict %s: %s", verdict, err)


def forget_verdict(verdict: str) -> None:
    """Drop a verdict (its file is being deleted or replaced)."""
    try:
        os.remove(verdict)
    except FileNotFoundError:
        pass


def _remembered(path: str, verdict: str, algo: str, expected: str) -> bool:
    try:
        st = os.stat(path)
        with open(verdict) as f:
            return json.load(f) == _fingerprint(st, algo, expected)
    except (OSError, ValueError):
        return False


def verify_file(path: str, verdict: str, algo: str, expected: str) -> str | None:
    """Check the file at ``path`` against ``expected`` (lowercase hex) under ``algo``.

    Returns:
        None if it matches (from a still-valid verdict, or by hashing it, which records a verdict); otherwise
        the actual digest (and any stale verdict is dropped).

    Raises:
        OSError: The file cannot be read.
    """
    if _remembered(path, verdict, algo, expected):
        return None
    st = os.stat(path)
    actual = hashing.hash_file(algo, path)
    if actual == expected.lower():
        record_verdict(path, verdict, algo, expected, st=st)
        return None
    forget_verdict(verdict)
    return actual
