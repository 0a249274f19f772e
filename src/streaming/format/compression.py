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
``decompress_file`` streams one file into another piece by piece (zstd, gz, bz2, br), so a shard being
decompressed can be read before it is complete; with ``max_bytes`` it stops as soon as the output passes that
size (a decompression bomb writes no more than the index declared).
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import io
from dataclasses import dataclass
from types import ModuleType
from typing import BinaryIO, Protocol

from streaming.util.sizes import SizeLimitExceeded

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

    def decompress(self, data: bytes | memoryview, *, max_bytes: int | None = None) -> bytes:
        """Decompress a whole file's bytes (the level is irrelevant for decoding).

        Raises:
            SizeLimitExceeded: The output would pass ``max_bytes`` (None: unbounded); decoding stops there, so
                memory never holds more than about ``max_bytes`` of output.
        """
        if max_bytes is not None and self.family == "zstd":
            # the common case, in one call: no chunked copies
            whole = _zstd_one_frame(data, max_bytes)
            if whole is not None:
                return whole
        if max_bytes is not None and self.family in ("zstd", "gz", "bz2", "br"):
            out = io.BytesIO()
            self.decompress_file(io.BytesIO(data), out, max_bytes=max_bytes)
            return out.getvalue()
        family = self.family
        if family == "zstd":
            return _zstd_decompress(data)
        if family == "gz":
            return gzip.decompress(data)
        if family == "bz2":
            return bz2.decompress(data)
        if family == "br":
            return _optional("brotli", family).decompress(bytes(data))
        if max_bytes is not None:
            _check_snappy_length(data, max_bytes)
        return _optional("snappy", family).decompress(bytes(data))

    def decompress_file(
        self, src: BinaryIO, dst: BinaryIO, *, chunk: int = 1 << 20, max_bytes: int | None = None
    ) -> int:
        """Decompress the file ``src`` into ``dst``, writing each piece (up to ``chunk`` bytes) once it is
        decoded, so a reader of ``dst`` sees a growing prefix; returns the bytes written. zstd (every frame),
        gz, bz2 and br stream; snappy (raw blocks have no streaming decoder) decodes in one piece, after its
        header's declared length is checked against ``max_bytes``.

        A truncated zstd frame ends the output early without an error: callers compare the count with the
        size they expect.

        Raises:
            SizeLimitExceeded: The output would pass ``max_bytes`` (None: unbounded). Nothing past
                ``max_bytes`` is written: a decompression bomb costs at most ``max_bytes`` of disk and one
                ``chunk`` of memory.
        """
        family = self.family
        if family == "br":
            return _brotli_into(_optional("brotli", family), src, dst, chunk, max_bytes)
        if family == "snappy":
            packed = src.read()
            if max_bytes is not None:
                _check_snappy_length(packed, max_bytes)
            data = self.decompress(packed)
            dst.write(data)
            return len(data)
        stream: _ReadInto
        if family == "zstd":
            import zstandard

            dctx = zstandard.ZstdDecompressor()
            stream = dctx.stream_reader(src, read_size=chunk, read_across_frames=True, closefd=False)
        elif family == "gz":
            stream = gzip.GzipFile(fileobj=src, mode="rb")
        else:
            stream = bz2.BZ2File(src, mode="rb")
        buf = memoryview(bytearray(chunk))
        total = 0
        while n := stream.readinto(buf):
            total += n
            _check_total(total, max_bytes)
            dst.write(buf[:n])
        return total


def _check_total(total: int, max_bytes: int | None) -> None:
    if max_bytes is not None and total > max_bytes:
        raise SizeLimitExceeded("decompressed output", max_bytes)


def _brotli_into(brotli: ModuleType, src: BinaryIO, dst: BinaryIO, chunk: int, max_bytes: int | None) -> int:
    """Stream a Brotli file, each piece of output about ``chunk`` bytes (brotli >= 1.2's output limit; older
    releases give what each ``chunk`` of input decodes to)."""
    dec = brotli.Decompressor()
    try:
        dec.process(b"", output_buffer_limit=chunk)
    except TypeError:
        # brotli < 1.2
        def step(data: bytes) -> bytes:
            return dec.process(data)
    else:

        def step(data: bytes) -> bytes:
            return dec.process(data, output_buffer_limit=chunk)

    total = 0
    while True:
        piece = src.read(chunk)
        out = step(piece)
        # drain what this piece decodes to before feeding more
        while out:
            total += len(out)
            _check_total(total, max_bytes)
            dst.write(out)
            out = b"" if dec.is_finished() else step(b"")
        if dec.is_finished():
            return total
        if not piece:
            raise OSError("brotli data is truncated: the stream does not end")


def _check_snappy_length(data: bytes | memoryview, max_bytes: int) -> None:
    """Raw snappy starts with the uncompressed length as a little-endian base-128 varint: refuse before
    allocating it."""
    length, shift = 0, 0
    for byte in bytes(data[:10]):
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if length > max_bytes:
        raise SizeLimitExceeded(f"snappy data declaring {length} bytes", max_bytes)


def _zstd_one_frame(data: bytes | memoryview, max_bytes: int | None) -> bytes | None:
    """``data`` decoded in one call when it is a single frame whose header states its size (at most
    ``max_bytes``: the output buffer is allocated at that size); None otherwise (decode it as a stream)."""
    import zstandard

    if max_bytes is not None:
        try:
            size = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            return None
        # -1: the header does not state the size
        if size < 0 or size > max_bytes:
            return None
    try:
        return zstandard.ZstdDecompressor().decompress(data, allow_extra_data=False)
    except zstandard.ZstdError:
        # no content size in the header, or several frames
        return None


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """One frame with a content size (fast path); otherwise stream across all frames (e.g. CLI output)."""
    import zstandard

    whole = _zstd_one_frame(data, None)
    if whole is not None:
        return whole
    dctx = zstandard.ZstdDecompressor()
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
