"""Compression: every family and level boundary round-trips; wire formats; invalid strings."""

from __future__ import annotations

import bz2
import gzip
import io
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.format.compression import (
    COMPRESSION_FAMILIES,
    Compression,
    get_compression,
    is_valid_compression,
)

DATA = b"".join(b"sample %d: the quick brown fox\n" % i for i in range(2000)) + bytes(range(256))

VALID = [
    "br", "br:0", "br:11",
    "bz2", "bz2:1", "bz2:9",
    "gz", "gz:0", "gz:9",
    "snappy",
    "zstd", "zstd:1", "zstd:22",
]  # fmt: skip


@pytest.mark.parametrize("spec", VALID)
def test_round_trip(spec: str) -> None:
    codec = get_compression(spec)
    packed = codec.compress(DATA)
    assert isinstance(packed, bytes)
    assert codec.decompress(packed) == DATA
    assert codec.decompress(memoryview(packed)) == DATA
    assert codec.compress(memoryview(DATA)) == packed  # deterministic, and memoryview input works
    assert codec.decompress(codec.compress(b"")) == b""
    assert codec.spec == spec and codec.extension == codec.family == spec.partition(":")[0]
    assert is_valid_compression(spec)


@pytest.mark.parametrize(
    ("spec", "level"),
    [("zstd", 3), ("gz", 9), ("bz2", 9), ("br", 11), ("snappy", None), ("zstd:7", 7), ("gz:0", 0)],
)
def test_default_levels(spec: str, level: int | None) -> None:
    assert get_compression(spec).level == level


def test_families() -> None:
    assert COMPRESSION_FAMILIES == ("br", "bz2", "gz", "snappy", "zstd")
    assert get_compression("zstd:7") == Compression(spec="zstd:7", family="zstd", level=7, extension="zstd")


def test_zstd_frame_has_magic_and_content_size() -> None:
    zstandard = pytest.importorskip("zstandard")
    packed = get_compression("zstd").compress(DATA)
    assert packed[:4] == bytes.fromhex("28b52ffd")
    assert zstandard.get_frame_parameters(packed).content_size == len(DATA)


def test_zstd_reads_frames_from_other_tools() -> None:
    zstandard = pytest.importorskip("zstandard")
    codec = get_compression("zstd")
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert codec.decompress(no_size) == DATA
    two_frames = zstandard.ZstdCompressor().compress(DATA[:100]) + no_size
    assert codec.decompress(two_frames) == DATA[:100] + DATA
    with pytest.raises(ValueError, match="truncated"):
        codec.decompress(no_size[:-5])


def test_snappy_is_raw_block_format() -> None:
    packed = get_compression("snappy").compress(DATA)
    # Raw snappy starts with the uncompressed length as a little-endian base-128 varint.
    n, varint = len(DATA), bytearray()
    while n >= 0x80:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    assert packed.startswith(bytes(varint))
    assert not packed.startswith(b"\xff\x06\x00\x00sNaPpY")  # not the framed format
    cramjam = pytest.importorskip("cramjam")
    assert bytes(cramjam.snappy.decompress_raw(packed)) == DATA


def test_gz_and_bz2_are_standard() -> None:
    gz = get_compression("gz:6").compress(DATA)
    assert gz[:2] == b"\x1f\x8b" and gz[4:8] == b"\x00\x00\x00\x00"  # RFC 1952, mtime 0
    assert gzip.decompress(gz) == DATA
    assert get_compression("gz").decompress(gzip.compress(DATA)) == DATA  # upstream files (mtime=now)
    assert bz2.decompress(get_compression("bz2:1").compress(DATA)) == DATA


def test_brotli_is_raw_stream() -> None:
    brotli = pytest.importorskip("brotli")
    assert brotli.decompress(get_compression("br:5").compress(DATA)) == DATA


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("lz4", "unknown family 'lz4'; valid: br"),
        ("zst", "unknown family 'zst'"),
        ("", "unknown family ''"),
        ("zstd:0", "zstd level must be 1..22, got 0"),
        ("zstd:23", "zstd level must be 1..22, got 23"),
        ("zstd:-1", "level '-1' must be an integer 1..22"),
        ("zstd:07", "level '07' must be an integer"),
        ("zstd:", "level '' must be an integer"),
        ("gz:10", "gz level must be 0..9"),
        ("bz2:0", "bz2 level must be 1..9"),
        ("br:12", "br level must be 0..11"),
        ("snappy:1", "snappy takes no level"),
        ("ZSTD", "unknown family"),
    ],
)
def test_invalid(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_compression(spec)
    assert not is_valid_compression(spec)


def test_is_valid_none_and_non_string() -> None:
    assert is_valid_compression(None)
    with pytest.raises(ValueError, match="must be a str"):
        get_compression(3)  # type: ignore[arg-type]


def test_missing_optional_codec_message(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("brotli", "snappy"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    for spec in ("br", "snappy"):
        with pytest.raises(
            ImportError,
            match=r"needs the '(brotli|snappy)' package: pip install 'foundry-stack\[compression\]'",
        ):
            get_compression(spec).compress(b"x")


@settings(max_examples=25, deadline=None)
@given(
    data=st.binary(max_size=5000) | st.sampled_from([DATA, DATA * 3]),
    spec=st.sampled_from(["br", "bz2", "gz", "snappy", "zstd"]),
    chunk=st.integers(1, 4096),
)
def test_decompress_file_streams_what_decompress_returns(data: bytes, spec: str, chunk: int) -> None:
    """``decompress_file`` (piece by piece into a file) writes exactly ``decompress``'s bytes, in pieces of at
    most ``chunk`` bytes for the streaming families."""
    codec = get_compression(spec)
    writes: list[int] = []

    class Recording(io.BytesIO):
        def write(self, b: Any) -> int:
            writes.append(len(b))
            return super().write(b)

    out = Recording()
    assert codec.decompress_file(io.BytesIO(codec.compress(data)), out, chunk=chunk) == len(data)
    assert out.getvalue() == data
    if spec in ("bz2", "gz", "zstd"):
        assert all(n <= chunk for n in writes)


def test_decompress_file_reads_every_zstd_frame() -> None:
    zstandard = pytest.importorskip("zstandard")
    two_frames = zstandard.ZstdCompressor().compress(DATA[:100]) + zstandard.ZstdCompressor(
        write_content_size=False
    ).compress(DATA)
    out = io.BytesIO()
    assert get_compression("zstd").decompress_file(io.BytesIO(two_frames), out, chunk=1000) == 100 + len(DATA)
    assert out.getvalue() == DATA[:100] + DATA
