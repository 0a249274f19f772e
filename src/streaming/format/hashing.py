"""Shard integrity hashes (spec §2.8): hashlib algorithms (no ``shake_*``) and the xxhash family.

index.json stores ``hexdigest()`` (lowercase hex) of each whole raw/zip file for every algorithm listed in the
shard's ``hashes`` (which must be sorted).

Design tradeoff: the set of algorithms is a fixed list (the ones mosaicml-streaming offers on every
platform), not whatever this machine's OpenSSL happens to expose, so a dataset written here never names a
hash another machine cannot check. Files are hashed in 1 MiB chunks through one reused buffer, so multi-GB
shards hash in constant memory at full hashlib/xxhash speed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

__all__ = [
    "HASH_OFF",
    "check_hashes",
    "check_validate_hash",
    "hash_bytes",
    "hash_file",
    "hash_to_check",
    "supported_hashes",
]

_HASHLIB = (
    "blake2b",
    "blake2s",
    "md5",
    "sha1",
    "sha224",
    "sha256",
    "sha384",
    "sha3_224",
    "sha3_256",
    "sha3_384",
    "sha3_512",
    "sha512",
)
_XXHASH = ("xxh128", "xxh32", "xxh3_128", "xxh3_64", "xxh64")
_CHUNK = 1 << 20
_FASTEST_FIRST = (
    "xxh3_64", "xxh3_128", "xxh64", "xxh128", "xxh32", "blake2b", "md5", "blake2s", "sha1", "sha512",
    "sha384", "sha256", "sha224", "sha3_224", "sha3_256", "sha3_384", "sha3_512",
)  # fmt: skip

HASH_OFF = "off"
"""``validate_hash`` value that turns checking off (``False`` and ``"none"`` mean the same)."""


def check_validate_hash(value: object, *, name: str = "validate_hash") -> str | None:
    """A ``validate_hash`` setting in its normal form: None (the default: check with the fastest digest the
    index records for each file, if any), ``HASH_OFF`` (never check: ``False``, ``"off"``, ``"none"``), or an
    algorithm name (check with it; a file the index records no such digest for is an error).

    Raises:
        ValueError: Anything else, naming ``name`` and the choices.
    """
    if value is None:
        return None
    if value is False or (isinstance(value, str) and value.lower() in (HASH_OFF, "none", "false")):
        return HASH_OFF
    if isinstance(value, str) and value in supported_hashes():
        return value
    raise ValueError(
        f"{name}={value!r}: use an algorithm ({', '.join(supported_hashes())}), or {HASH_OFF!r} to skip "
        "checks (unset: check with the fastest digest the index records)"
    )


def hash_to_check(setting: str | None, recorded: Iterable[str]) -> str | None:
    """The algorithm to verify a file with: ``setting`` itself when it names one, none when it is
    ``HASH_OFF``, else (unset) the fastest of the digests the index ``recorded`` (none if it has none)."""
    if setting == HASH_OFF:
        return None
    if setting is not None:
        return setting
    have = set(recorded)
    for algo in _FASTEST_FIRST:
        if algo in have and (algo not in _XXHASH or _has_xxhash()):
            return algo
    return None


def _has_xxhash() -> bool:
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return False
    return True


def supported_hashes() -> tuple[str, ...]:
    """All supported hash algorithm names, sorted."""
    return tuple(sorted(_HASHLIB + _XXHASH))


class _Hasher(Protocol):
    """What hashlib and xxhash hash objects share."""

    def update(self, data: bytes | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...


def _constructor(algo: str) -> Callable[..., _Hasher]:
    """The hash object constructor of ``algo`` (called with no argument, or with the initial data)."""
    if algo in _HASHLIB:
        return getattr(hashlib, algo)
    if algo in _XXHASH:
        try:
            import xxhash
        except ImportError as err:
            raise ImportError(f"hash {algo!r} needs the 'xxhash' package: pip install xxhash") from err
        return getattr(xxhash, algo)
    raise ValueError(f"unknown hash algorithm {algo!r}; supported: {', '.join(supported_hashes())}")


def check_hashes(algos: Sequence[str]) -> None:
    """Validate a writer's ``hashes`` list: every name supported, sorted, no duplicates.

    Args:
        algos: Hash algorithm names.

    Raises:
        ValueError: A name is unknown, the list is not sorted, or a name repeats; the message says which.
    """
    if isinstance(algos, str):
        raise ValueError(
            f"hashes must be a list of algorithm names, got the string {algos!r}; write [{algos!r}]"
        )
    for algo in algos:
        if algo not in _HASHLIB and algo not in _XXHASH:
            raise ValueError(f"unknown hash algorithm {algo!r}; supported: {', '.join(supported_hashes())}")
    names = list(algos)
    dupes = sorted({a for a in names if names.count(a) > 1})
    if dupes:
        raise ValueError(f"hashes {names} repeat {', '.join(dupes)}; list each algorithm once")
    if names != sorted(names):
        raise ValueError(
            f"hashes {names} must be sorted (mosaicml-streaming requires it); use {sorted(names)}"
        )


def hash_bytes(algo: str, data: bytes | memoryview) -> str:
    """Lowercase hex digest of ``data`` under ``algo``.

    Raises:
        ValueError: ``algo`` is not supported.
    """
    return _constructor(algo)(data).hexdigest()


def hash_file(algo: str, path: str) -> str:
    """Lowercase hex digest of the file at ``path`` under ``algo``, read in 1 MiB chunks.

    Raises:
        ValueError: ``algo`` is not supported.
        OSError: The file cannot be read.
    """
    hasher = _constructor(algo)()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            hasher.update(view[:n])
    return hasher.hexdigest()
