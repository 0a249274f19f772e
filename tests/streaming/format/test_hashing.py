"""Hashing: every algorithm matches hashlib/xxhash directly; file hashing; check_hashes errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import xxhash

from streaming.format.hashing import check_hashes, hash_bytes, hash_file, supported_hashes

DATA = bytes(range(256)) * 9000 + b"tail"  # > 2 MiB so hash_file takes several chunks

EXPECTED = (
    "blake2b blake2s md5 sha1 sha224 sha256 sha384 sha3_224 sha3_256 sha3_384 sha3_512 sha512 "
    "xxh128 xxh32 xxh3_128 xxh3_64 xxh64"
).split()


def reference(algo: str, data: bytes) -> str:
    module = xxhash if algo.startswith("xxh") else hashlib
    return getattr(module, algo)(data).hexdigest()


def test_supported_list() -> None:
    assert supported_hashes() == tuple(sorted(EXPECTED))
    assert not any(a.startswith("shake_") for a in supported_hashes())


@pytest.mark.parametrize("algo", EXPECTED)
def test_matches_reference(algo: str, tmp_path: Path) -> None:
    expected = reference(algo, DATA)
    assert hash_bytes(algo, DATA) == expected
    assert hash_bytes(algo, memoryview(DATA)) == expected
    assert expected == expected.lower()
    path = tmp_path / "shard.00000.mds"
    path.write_bytes(DATA)
    assert hash_file(algo, str(path)) == expected
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert hash_file(algo, str(empty)) == reference(algo, b"")


def test_known_vectors() -> None:
    assert hash_bytes("sha256", b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert hash_bytes("md5", b"") == "d41d8cd98f00b204e9800998ecf8427e"
    assert hash_bytes("xxh64", b"") == "ef46db3751d8e999"


def test_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="unknown hash algorithm 'crc32'; supported: blake2b"):
        hash_bytes("crc32", b"")
    with pytest.raises(ValueError, match="unknown hash algorithm 'shake_128'"):
        hash_file("shake_128", "/nonexistent")


def test_check_hashes() -> None:
    check_hashes([])
    check_hashes(["sha1", "xxh64"])
    check_hashes(list(supported_hashes()))
    with pytest.raises(ValueError, match=r"must be sorted .*; use \['sha1', 'xxh64'\]"):
        check_hashes(["xxh64", "sha1"])
    with pytest.raises(ValueError, match="repeat sha1; list each algorithm once"):
        check_hashes(["sha1", "sha1"])
    with pytest.raises(ValueError, match="unknown hash algorithm 'sha-1'; supported:"):
        check_hashes(["sha-1"])
    with pytest.raises(ValueError, match="got the string 'sha1'"):
        check_hashes("sha1")
