"""Whole-file shard compression: ``zstd``, ``gz``, ``bz2``, ``br`` and ``snappy`` (spec §2.7).

A compression string is ``<family>`` or ``<family>:<level>``; the string is kept verbatim in index.json
(``"zstd"`` and ``"zstd:3"`` are both valid and mean the same), and a compressed file takes the family as its
extension (``shard.00000.mds.zstd``). Wire formats match mosaicml-streaming: zstd is one standard frame with
the content size in its header, snappy is the *raw* block format (not the framed one), gz is RFC 1952, br a
raw Brotli stream.

Design tradeoff: a codec object is created per call instead of being cached, so a :class:`Compression` is a
plain immutable value that is safe to share across writer threads; the setup cost (microseconds) is noise
next to compressing a multi-megabyte shard. gzip output uses ``mtime=0`` so identical shards compress to
identical bytes (upstream stamps the current time). Optional codecs (brotli, snappy) are imported lazily.
``decompress_file`` streams one file into another piece by piece (zstd, gz, bz2), so a shard being
decompressed can be read before it is complete.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import io
from dataclasses import dataclass
from types import ModuleType
from typing import BinaryIO, Protocol

__all__ = ["COMPRESSION_FAMILIES", "Compression", "get_compression", "is_valid_compression"]

COMPRESSION_FAMILIES: tuple[str, ...] = ("br", "bz2", "gz", "snappy", "zstd")
"""Compression families; each is also the file extension of its compressed files."""

# family -> (min level, max level, default level); snappy has no levels.
_LEVELS: dict[str, tuple[int, int, int] | None] = {
    "br": (0, 11, 11),
    "bz2": (1, 9, 9),
    "gz": (0, 9, 9),
    "snappy": None,
    "zstd": (1, 22, 3),
}
_INSTALL_HINT = "pip install 'foundry-stack[compression]'"


def _valid_forms() -> str:
    forms = []
    for family in COMPRESSION_FAMILIES:
        levels = _LEVELS[family]
        forms.append(
            family if levels is None else f"{family}[:{levels[0]}..{levels[1]}] (default {levels[2]})"
        )
    return ", ".join(forms)


def _optional(module: str, family: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{family!r} compression needs the {module!r} package: {_INSTALL_HINT}") from err


class _ReadInto(Protocol):
    def readinto(self, buffer: memoryview, /) -> int: ...


@dataclass(frozen=True)
class Compression:
    """A parsed compression string.

    Attributes:
        spec: Exactly the user's string, e.g. ``"zstd:7"`` (kept verbatim in index.json).
        family: ``"zstd"``, ``"gz"``, ``"bz2"``, ``"br"`` or ``"snappy"``.
        level: The effective level (the family default when the string has none); ``None`` for snappy.
        extension: File suffix without the dot; equal to ``family``.
    """

    spec: str
    family: str
    level: int | None
    extension: str

    def compress(self, data: bytes | memoryview) -> bytes:
        """Compress a whole file's bytes in one shot."""
        family, level = self.family, self.level
        if family == "snappy":
            return _optional("snappy", family).compress(bytes(data))
        if level is None:
            raise ValueError(
                f"compression {self.spec!r}: {family} needs a level; build it with get_compression()"
            )
        if family == "zstd":
            import zstandard

            return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)
        if family == "gz":
            return gzip.compress(data, compresslevel=level, mtime=0)
        if family == "bz2":
            return bz2.compress(data, compresslevel=level)
        if family == "br":
            return _optional("brotli", family).compress(bytes(data), quality=level)
        raise ValueError(f"compression {self.spec!r}: unknown family {family!r}")

    def decompress(self, data: bytes | memoryview) -> bytes:
        """Decompress a whole file's bytes (the level is irrelevant for decoding)."""
        family = self.family
        if family == "zstd":
            return _zstd_decompress(data)
        if family == "gz":
            return gzip.decompress(data)
        if family == "bz2":
            return bz2.decompress(data)
        if family == "br":
            return _optional("brotli", family).decompress(bytes(data))
        return _optional("snappy", family).decompress(bytes(data))

    def decompress_file(self, src: BinaryIO, dst: BinaryIO, *, chunk: int = 1 << 20) -> int:
        """Decompress the file ``src`` into ``dst``, writing each piece (up to ``chunk`` bytes) once it is
        decoded, so a reader of ``dst`` sees a growing prefix; returns the bytes written. zstd (every frame),
        gz and bz2 stream; br and snappy (no streaming decoder in their packages) decode in one piece.

        A truncated zstd frame ends the output early without an error: callers compare the count with the
        size they expect.
        """
        family = self.family
        stream: _ReadInto
        if family == "zstd":
            import zstandard

            dctx = zstandard.ZstdDecompressor()
            stream = dctx.stream_reader(src, read_size=chunk, read_across_frames=True, closefd=False)
        elif family == "gz":
            stream = gzip.GzipFile(fileobj=src, mode="rb")
        elif family == "bz2":
            stream = bz2.BZ2File(src, mode="rb")
        else:
            data = self.decompress(src.read())
            dst.write(data)
            return len(data)
        buf = memoryview(bytearray(chunk))
        total = 0
        while n := stream.readinto(buf):
            dst.write(buf[:n])
            total += n
        return total


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """One frame with a content size (fast path); otherwise stream across all frames (e.g. CLI output)."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    try:
        return dctx.decompress(data, allow_extra_data=False)
    except zstandard.ZstdError:
        pass  # no content size in the header, or several frames: decode as a stream
    out = io.BytesIO()
    rest = bytes(data)
    while rest:
        obj = dctx.decompressobj()
        out.write(obj.decompress(rest))
        if not obj.eof:
            raise ValueError("zstd data is truncated: its last frame does not end")
        rest = obj.unused_data
    return out.getvalue()


def get_compression(spec: str) -> Compression:
    """Parse a compression string such as ``"zstd"``, ``"zstd:7"``, ``"gz:9"`` or ``"snappy"``.

    Args:
        spec: The compression string.

    Returns:
        The parsed :class:`Compression`.

    Raises:
        ValueError: The string is not valid; the message names it and lists the valid forms.
    """
    if not isinstance(spec, str):
        raise ValueError(f"compression must be a str such as 'zstd', got {spec!r}; valid: {_valid_forms()}")
    family, sep, text = spec.partition(":")
    if family not in _LEVELS:
        raise ValueError(f"invalid compression {spec!r}: unknown family {family!r}; valid: {_valid_forms()}")
    levels = _LEVELS[family]
    if levels is None:
        if sep:
            raise ValueError(f"invalid compression {spec!r}: {family} takes no level; write {family!r}")
        return Compression(spec=spec, family=family, level=None, extension=family)
    low, high, default = levels
    if not sep:
        return Compression(spec=spec, family=family, level=default, extension=family)
    if not (text.isascii() and text.isdigit() and text == str(int(text))):
        raise ValueError(f"invalid compression {spec!r}: level {text!r} must be an integer {low}..{high}")
    level = int(text)
    if not low <= level <= high:
        raise ValueError(f"invalid compression {spec!r}: {family} level must be {low}..{high}, got {level}")
    return Compression(spec=spec, family=family, level=level, extension=family)


def is_valid_compression(spec: str | None) -> bool:
    """Whether ``spec`` is a valid compression string (``None``, meaning no compression, is valid)."""
    if spec is None:
        return True
    try:
        get_compression(spec)
    except ValueError:
        return False
    return True
