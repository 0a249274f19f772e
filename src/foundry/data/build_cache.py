"""Keyed, immutable build folders shared between processes: built once, published by a rename, never changed.

Design note: a cache that several runs read at once (the quick start's tokenizer and MDS splits) must never
change under a reader. So each build lives in its own folder named by a hash of everything that determines its
content (`build_key`): different parameters get a different folder and leave the others as they are. A build
is written into a temporary sibling folder and published with one `rename`, so a folder that exists is
complete. Builders of the same key serialize on an `flock` (`streaming.cache.locks`, dropped by the kernel
when its holder dies, even by `kill -9`): the first builds, the others wait and then reuse its folder. The
price is one folder per parameter set (old ones are never garbage-collected: delete the cache folder to
reclaim them).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from streaming.cache.locks import open_lock

__all__ = ["build_key", "publish_once"]

log = logging.getLogger(__name__)


def rank_zero_only(record: logging.LogRecord) -> bool:
    """A logging filter: only global rank 0 (``$RANK``, 0 outside torchrun) says what shared builds do; every
    rank runs them (and waits on the same lock), so the other ranks' lines were the same news N times."""
    return os.environ.get("RANK", "0") == "0" or record.levelno >= logging.WARNING


log.addFilter(rank_zero_only)

TMP_PREFIX = ".tmp-"
"""Temporary build folders are `<root>/.tmp-<name>-<random>` (removed by the next builder of `name`)."""


def build_key(params: Mapping[str, object]) -> str:
    """A short, stable hash (12 hex digits) of `params` (JSON-serialisable; key order does not matter)."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def publish_once(root: Path, name: str, *, build: Callable[[Path], None], what: str) -> tuple[Path, bool]:
    """`root/name`, built first by `build(tmp_folder)` unless it is already published.

    Args:
        root: The cache folder (created if absent); the lock files live in its hidden sibling folder
            `.<root name>.locks` (`streaming.cache.locks.lock_dir`), not inside it.
        name: The build's folder name; it must encode every input of `build` (see `build_key`).
        build: Writes the complete build into the (empty) folder it is given.
        what: What is built, for the log line printed while waiting for another builder.

    Returns:
        The published folder and whether this call built it (False: it existed, or another process built it
        while this one waited).
    """
    final = root / name
    if final.is_dir():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    fd = open_lock(str(root), name)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another process is building %s, waiting for it", what, final)
            fcntl.flock(fd, fcntl.LOCK_EX)
        if final.is_dir():
            return final, False
        # left by a builder that died (we hold the lock)
        for stale in root.glob(f"{TMP_PREFIX}{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=root))
        try:
            tmp.chmod(0o755)
            build(tmp)
            # atomic; fails rather than replace a folder published without the lock
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return final, True
    finally:
        # releases the lock
        os.close(fd)
