"""Moving whole files between storage and local disk: atomic, bounded in time, retried only when worth it.

A download goes to ``<path>.tmp-<pid>-<n>`` and is renamed into place only when complete (and, if asked,
hash-verified), so a crash or ``kill -9`` never leaves a partial file under the real name. Transient failures
(connection resets, timeouts, HTTP 5xx/429) are retried for a time ``budget`` (default 5 minutes: stores have
outages of minutes, and a run that dies after 1.3 s of one loses everything since its last checkpoint), with
capped exponential backoff and jitter, each retry logged with the redacted URL; ``retries`` optionally caps
the count too. The jitter comes from a private RNG per transfer, never Python's global ``random``, so a retry
leaves a training run's RNG state (and its checkpoint) as an uninterrupted run's. A missing object fails at
once with its URL in the message. A hash mismatch triggers one fresh download, then a clear error.
"""

from __future__ import annotations

import functools
import itertools
import logging
import mmap
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from streaming.format.hashing import hash_file
from streaming.storage.backends import Backend, get_backend
from streaming.storage.errors import TransientStorageError
from streaming.storage.ranged import RangedConfig, download_ranged
from streaming.storage.url import redact
from streaming.util.safepath import UnsafePathError, is_within

__all__ = [
    "HashMismatchError",
    "RetryPolicy",
    "can_download_to_memory",
    "delete_file",
    "download_file",
    "download_to_memory",
    "list_files",
    "upload_file",
]

log = logging.getLogger("streaming.storage")
_counter = itertools.count()


class HashMismatchError(OSError, ValueError):
    """A downloaded file's digest differs from the index after a re-download (a `ValueError` too: a corrupt
    dataset is the user's to fix, and `train.py` reports it as one error line)."""


DEFAULT_RANGED = RangedConfig()
"""Large objects of known size are fetched as parallel ranges by default."""

DEFAULT_BUDGET = 300.0
"""Seconds a transfer keeps retrying transient failures by default."""


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: until ``budget`` seconds have passed since the first attempt.

    Attributes:
        retries: At most this many extra attempts after the first as well (None: as many as the budget allows;
            0: try once).
        timeout: Seconds allowed for one attempt's connect/read (per backend call).
        initial_backoff: Sleep before the first retry; doubles each retry.
        max_backoff: Cap on one sleep (10 s: a transfer resumes within ~10 s of the end of an outage, which
            matters more than the few extra requests it costs during one).
        budget: Seconds from the first attempt after which no retry starts (the last sleep is cut to fit).
        setting: The config field that sets the budget, named when it is spent
            (e.g. ``data.download_budget``).
    """

    retries: int | None = None
    timeout: float = 60.0
    initial_backoff: float = 0.5
    max_backoff: float = 10.0
    budget: float = DEFAULT_BUDGET
    setting: str = "budget"

    def __post_init__(self) -> None:
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"retries must be >= 0 (extra attempts after the first), got {self.retries}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.budget < 0:
            raise ValueError(f"{self.setting} must be >= 0 seconds, got {self.budget}")

    def sleep_for(self, attempt: int, rng: random.Random) -> float:
        """Backoff before retry number ``attempt`` (1-based):
        exponential, capped, with jitter from ``rng``."""
        cap = min(self.max_backoff, self.initial_backoff * (2 ** min(attempt - 1, 60)))
        return rng.uniform(cap / 2, cap)


def _with_retries(what: str, url: str, policy: RetryPolicy, fn: Callable[[], None]) -> None:
    # private: the global RNG is the run's
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            fn()
            return
        except TransientStorageError as err:
            attempt += 1
            elapsed = time.monotonic() - start
            left = policy.budget - elapsed
            if (policy.retries is not None and attempt > policy.retries) or left <= 0:
                limit = (
                    f"retries={policy.retries}"
                    if policy.retries is not None and attempt > policy.retries
                    else f"{policy.setting}={policy.budget:g} s"
                )
                raise TransientStorageError(
                    f"{what} {redact(url)} failed after {attempt} attempt(s) over {elapsed:.0f} s ({limit} "
                    f"spent): {err}"
                ) from None
            delay = min(policy.sleep_for(attempt, rng), left)
            log.warning(
                "%s %s: %s; retry %d in %.2fs (%.0f of %g s %s left)",
                what,
                redact(url),
                err,
                attempt,
                delay,
                left,
                policy.budget,
                policy.setting,
            )
            time.sleep(delay)


def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{next(_counter)}"


def _attempt(
    backend: Backend,
    url: str,
    tmp: str,
    policy: RetryPolicy,
    on_tmp: Callable[[str], None] | None,
    max_bytes: int | None,
    ranged: RangedConfig | None,
) -> None:
    """One download attempt into ``tmp`` (a retry truncates it and writes it again from the start)."""
    if on_tmp is not None:
        on_tmp(tmp)
    if ranged is not None and max_bytes is not None and backend.ranged_reads:

        def read(start: int, end: int) -> tuple[bytes, int | None]:
            return backend.read_range(url, start, end, timeout=policy.timeout) or (b"", None)

        if download_ranged(url, tmp, max_bytes, read, ranged):
            return
    backend.download(url, tmp, timeout=policy.timeout, max_bytes=max_bytes)


def download_file(
    url: str,
    path: str,
    *,
    policy: RetryPolicy | None = None,
    expected_hashes: dict[str, str] | None = None,
    validate_hash: str | None = None,
    root: str | None = None,
    on_tmp: Callable[[str], None] | None = None,
    max_bytes: int | None = None,
    ranged: RangedConfig | None = DEFAULT_RANGED,
) -> None:
    """Download ``url`` to ``path`` atomically.

    Args:
        url: Source URL (any supported scheme) or local path.
        path: Destination file; its directory is created.
        policy: Retries and timeout (default: 2 retries, 60 s).
        expected_hashes: ``{algo: hexdigest}`` from the index (used with ``validate_hash``).
        validate_hash: An algorithm to verify after download; a mismatch re-downloads once, then raises.
        root: The folder ``path`` must stay under. Pass it whenever ``path`` was built from a name read from
            an untrusted file or listing (index basenames, object names); nothing is created or written
            otherwise.
        on_tmp: Told the temp file's name before each attempt writes it (front to back; a retry truncates it
            first), so another thread can read what has arrived (``streaming.reader.growing_shard``).
        max_bytes: The most bytes the object may have (what an index declares): a larger one is refused,
            before its body is read where the store states its size, else as soon as the bound is passed.
        ranged: How a large object is fetched as parallel byte ranges (``streaming.storage.ranged``), when
            ``max_bytes`` gives its size and the store serves ranges; None: always one whole-object request.

    Raises:
        streaming.util.safepath.UnsafePathError: ``path`` leaves ``root`` (before any directory or file is
            made).
        FileNotFoundError: The object does not exist (no retry).
        PermissionError: Access denied (no retry).
        TransientStorageError: Still failing after every retry.
        HashMismatchError: The digest is still wrong after one re-download.
        streaming.util.sizes.SizeLimitExceeded: The object is larger than ``max_bytes`` (no retry; nothing
            kept).
    """
    if root is not None and not is_within(root, path):
        raise UnsafePathError(
            f"download {redact(url)}: destination {path} is outside its folder {os.path.abspath(root)}; the "
            "file name came from an untrusted index or listing and must be a relative name without '..'"
        )
    policy = policy or RetryPolicy()
    backend = get_backend(url)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    digest = _expected_digest(url, expected_hashes, validate_hash)
    for check in range(2):
        tmp = _tmp_name(path)
        try:
            attempt = functools.partial(_attempt, backend, url, tmp, policy, on_tmp, max_bytes, ranged)
            _with_retries("download", url, policy, attempt)
            if digest is not None and not _digest_ok(url, tmp, *digest, last=check == 1):
                continue
            os.replace(tmp, path)
            return
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _expected_digest(
    url: str, expected_hashes: dict[str, str] | None, validate_hash: str | None
) -> tuple[str, str] | None:
    """``(algorithm, digest)`` to check a download of ``url`` against; None when ``validate_hash`` is unset.

    Raises:
        ValueError: The index records no digest for ``validate_hash``.
    """
    if not validate_hash:
        return None
    expected = (expected_hashes or {}).get(validate_hash)
    if expected is None:
        raise ValueError(
            f"validate_hash={validate_hash!r} but the index records no "
            f"{validate_hash} digest for {redact(url)}"
        )
    return validate_hash, expected


def _digest_ok(url: str, path: str, algo: str, expected: str, *, last: bool) -> bool:
    """Whether the file at ``path`` hashes to ``expected``; a mismatch is logged (to download again) unless
    it is the ``last`` try, which raises ``HashMismatchError``."""
    actual = hash_file(algo, path)
    if actual == expected:
        return True
    if not last:
        log.warning(
            "download %s: %s mismatch (%s != %s); downloading again", redact(url), algo, actual, expected
        )
        return False
    raise HashMismatchError(
        f"{redact(url)}: {algo} is {actual} after two downloads, index.json says {expected}; the remote file "
        "or its index is corrupt (run `python -m streaming validate`)"
    )


def can_download_to_memory() -> bool:
    """Whether ``download_to_memory`` works here (it needs ``memfd_create``: Linux)."""
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def download_to_memory(
    url: str,
    *,
    policy: RetryPolicy | None = None,
    expected_hashes: dict[str, str] | None = None,
    validate_hash: str | None = None,
    max_bytes: int | None = None,
) -> memoryview:
    """The object at ``url`` downloaded into anonymous memory (a ``memfd``, never a file on disk) and mapped
    read-only; freed when the last view of it goes. Retries, the hash check and ``max_bytes`` as
    ``download_file``.

    Raises:
        The errors of ``download_file``; ``OSError`` where ``can_download_to_memory()`` is False.
    """
    policy = policy or RetryPolicy()
    backend = get_backend(url)
    digest = _expected_digest(url, expected_hashes, validate_hash)
    for check in range(2):
        fd = os.memfd_create("streaming-shard", getattr(os, "MFD_CLOEXEC", 0))
        try:
            path = f"/proc/self/fd/{fd}"  # backends write to a path; this one is the memory file
            _with_retries(
                "download",
                url,
                policy,
                functools.partial(_attempt, backend, url, path, policy, None, max_bytes, DEFAULT_RANGED),
            )
            if digest is not None and not _digest_ok(url, path, *digest, last=check == 1):
                continue
            size = os.fstat(fd).st_size
            return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ)) if size else memoryview(b"")
        finally:
            os.close(fd)  # the mapping keeps the memory
    raise AssertionError("unreachable")


def upload_file(path: str, url: str, *, policy: RetryPolicy | None = None) -> None:
    """Upload a local file to ``url`` (retrying transient failures)."""
    policy = policy or RetryPolicy()
    backend = get_backend(url)
    _with_retries("upload", url, policy, lambda: backend.upload(path, url, timeout=policy.timeout))


def list_files(url: str, *, policy: RetryPolicy | None = None) -> list[str]:
    """Every object URL under the prefix ``url``, sorted (transient failures retried as downloads are)."""
    out: list[str] = []
    backend = get_backend(url)
    _with_retries("list", url, policy or RetryPolicy(), lambda: out.extend(backend.list(url)))
    return out


def delete_file(url: str, *, policy: RetryPolicy | None = None) -> None:
    """Delete the object at ``url`` (transient failures retried as uploads are)."""
    backend = get_backend(url)
    _with_retries("delete", url, policy or RetryPolicy(), lambda: backend.delete(url))
