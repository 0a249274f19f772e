"""Image column encodings for MDS: ``pil``, ``jpeg``, ``png``, ``list[pil|jpeg|png]`` and ``jpeg_array``.

Byte layouts (spec §2.4, all integers uint32 little-endian):

- ``pil``: ``width, height, len(mode)``, the mode as UTF-8, then ``Image.tobytes()`` raw pixels.
- ``jpeg`` / ``png``: the image file bytes. A ``jpeg`` value that is a JPEG opened from a file that still
  exists is stored as that file's bytes unchanged (no lossy re-encode); anything else is saved with Pillow's
  defaults (JPEG quality 75).
- ``list[...]``: ``0`` (reserved word), ``n``, ``size[n]``, then the n element encodings back to back.
- ``jpeg_array`` (alias ``jpegarray``): ``n``, ``size[n]``, then n JPEG files; no reserved word.

Design tradeoff: Pillow is imported lazily, inside the functions that touch pixels, so that parsing encoding
strings, inspecting datasets and reading non-image columns never needs it; the price is a clear ImportError
at the first image encode/decode instead of at import time. Decoding returns what upstream returns (lazy
``Image.open`` for file formats), so a corrupt JPEG surfaces when its pixels are first loaded.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

from streaming.format.encoding_base import Encoding, EncodingError, UnknownEncodingError, type_name

__all__ = ["IMAGE_ENCODING_NAMES", "get_image_encoding", "require_pillow"]

IMAGE_ENCODING_NAMES: tuple[str, ...] = (
    "pil",
    "jpeg",
    "png",
    "list[pil]",
    "list[jpeg]",
    "list[png]",
    "jpeg_array",
    "jpegarray",
)
_INSTALL_HINT = "pip install 'foundry-stack[images]'"
_U32 = struct.Struct("<I")
_PIL_HEAD = struct.Struct("<3I")


def require_pillow() -> ModuleType:
    """Import and return ``PIL.Image``.

    Raises:
        ImportError: Pillow is not installed; the message says how to install it.
    """
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError(
            f"the MDS image encodings need Pillow, which is not installed: {_INSTALL_HINT}"
        ) from err
    return Image


def _check_image(obj: Any, name: str) -> None:
    if not isinstance(obj, require_pillow().Image):
        raise EncodingError(f"encoding {name!r} needs a PIL.Image.Image, got {type_name(obj)}")


def _save(obj: Any, name: str, fmt: str) -> bytes:
    out = io.BytesIO()
    try:
        obj.save(out, format=fmt)
    except (OSError, ValueError, KeyError) as err:
        hint = "; convert it first, e.g. image.convert('RGB')" if fmt == "JPEG" else ""
        raise EncodingError(
            f"encoding {name!r}: cannot save a mode {obj.mode} image as {fmt} ({err}){hint}"
        ) from None
    return out.getvalue()


def _open(data: bytes | memoryview) -> Any:
    return require_pillow().open(io.BytesIO(data))


class _PIL(Encoding):
    def encode(self, obj: Any) -> bytes:
        _check_image(obj, self.name)
        mode = obj.mode.encode("utf-8")
        width, height = obj.size
        return _PIL_HEAD.pack(width, height, len(mode)) + mode + obj.tobytes()

    def decode(self, data: bytes | memoryview) -> Any:
        image = require_pillow()
        if len(data) < _PIL_HEAD.size:
            raise EncodingError(f"encoding 'pil': corrupt value of {len(data)} bytes (header needs 12)")
        width, height, mode_len = _PIL_HEAD.unpack_from(data, 0)
        start = _PIL_HEAD.size + mode_len
        mode = str(data[_PIL_HEAD.size : start], "utf-8")
        try:
            return image.frombytes(mode, (width, height), data[start:])
        except ValueError as err:
            raise EncodingError(f"encoding 'pil': corrupt {mode} {width}x{height} image ({err})") from None


class _JPEG(Encoding):
    def encode(self, obj: Any) -> bytes:
        _check_image(obj, self.name)
        from PIL.JpegImagePlugin import JpegImageFile

        filename = getattr(obj, "filename", None) if isinstance(obj, JpegImageFile) else None
        if filename:
            try:
                with open(filename, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                # the source file is gone: re-encode from pixels
                pass
        return _save(obj, self.name, "JPEG")

    def decode(self, data: bytes | memoryview) -> Any:
        return _open(data)


class _PNG(Encoding):
    def encode(self, obj: Any) -> bytes:
        _check_image(obj, self.name)
        return _save(obj, self.name, "PNG")

    def decode(self, data: bytes | memoryview) -> Any:
        return _open(data)


def _split(data: bytes | memoryview, *, start: int, count: int, name: str) -> list[memoryview]:
    """Slice ``count`` payloads whose uint32 sizes start at byte ``start``; check the total length."""
    view = memoryview(data)
    end = start + 4 * count
    if len(view) < end:
        raise EncodingError(f"encoding {name!r}: corrupt value, {len(view)} bytes cannot hold {count} sizes")
    sizes = struct.unpack_from(f"<{count}I", view, start)
    if end + sum(sizes) != len(view):
        raise EncodingError(
            f"encoding {name!r}: corrupt value, {count} elements of {sum(sizes)} "
            f"bytes do not fill {len(view) - end}"
        )
    parts = []
    for size in sizes:
        parts.append(view[end : end + size])
        end += size
    return parts


def _pack_sizes(parts: list[bytes], name: str) -> bytes:
    try:
        return struct.pack(f"<{len(parts)}I", *(len(p) for p in parts))
    except struct.error:
        raise EncodingError(f"encoding {name!r}: an element is 4 GiB or larger") from None


class _List(Encoding):
    """``list[pil|jpeg|png]``: reserved ``0``, ``n``, ``size[n]``, elements.
    ``bytes`` elements pass through."""

    def __init__(self, name: str, element: Encoding) -> None:
        super().__init__(name)
        self.element = element

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, (list, tuple)):
            raise EncodingError(f"encoding {self.name!r} needs a list of images, got {type_name(obj)}")
        parts = []
        for i, item in enumerate(obj):
            try:
                parts.append(bytes(item) if isinstance(item, bytes) else self.element.encode(item))
            except EncodingError as err:
                raise EncodingError(f"encoding {self.name!r}: element {i}: {err}") from None
        return b"".join([_U32.pack(0), _U32.pack(len(parts)), _pack_sizes(parts, self.name), *parts])

    def decode(self, data: bytes | memoryview) -> list[Any]:
        if len(data) < 8:
            raise EncodingError(
                f"encoding {self.name!r}: corrupt value of {len(data)} bytes (header needs 8)"
            )
        count = _U32.unpack_from(data, 4)[0]
        return [self.element.decode(part) for part in _split(data, start=8, count=count, name=self.name)]


class _JPEGArray(Encoding):
    """``jpeg_array``: ``n``, ``size[n]``, n JPEG files. Elements are JPEG bytes (or PIL images, encoded)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._jpeg = _JPEG("jpeg")

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, (str, bytes, bytearray)) or not isinstance(obj, (list, tuple)):
            raise EncodingError(f"encoding {self.name!r} needs a list of JPEG bytes, got {type_name(obj)}")
        if not obj:
            raise EncodingError(
                f"encoding {self.name!r}: empty list; a jpeg_array needs at least one image "
                "(mosaicml-streaming cannot decode an empty one)"
            )
        parts = []
        for i, item in enumerate(obj):
            if isinstance(item, (bytes, bytearray, memoryview)):
                parts.append(bytes(item))
            else:
                try:
                    parts.append(self._jpeg.encode(item))
                except EncodingError as err:
                    raise EncodingError(f"encoding {self.name!r}: element {i}: {err}") from None
        return b"".join([_U32.pack(len(parts)), _pack_sizes(parts, self.name), *parts])

    def decode(self, data: bytes | memoryview) -> list[Any]:
        if len(data) < 4:
            raise EncodingError(
                f"encoding {self.name!r}: corrupt value of {len(data)} bytes (header needs 4)"
            )
        count = _U32.unpack_from(data, 0)[0]
        if count == 0:
            raise EncodingError(
                f"encoding {self.name!r}: value holds 0 images (an empty jpeg_array is invalid)"
            )
        return [_open(part) for part in _split(data, start=4, count=count, name=self.name)]


_FACTORIES: dict[str, Callable[[str], Encoding]] = {
    "pil": _PIL,
    "jpeg": _JPEG,
    "png": _PNG,
    "list[pil]": lambda name: _List(name, _PIL("pil")),
    "list[jpeg]": lambda name: _List(name, _JPEG("jpeg")),
    "list[png]": lambda name: _List(name, _PNG("png")),
    "jpeg_array": _JPEGArray,
    "jpegarray": _JPEGArray,
}


def get_image_encoding(spec: str) -> Encoding:
    """Build the image encoding named ``spec`` (one of :data:`IMAGE_ENCODING_NAMES`); no Pillow needed yet.

    Raises:
        UnknownEncodingError: ``spec`` is not an image encoding.
    """
    factory = _FACTORIES.get(spec)
    if factory is None:
        raise UnknownEncodingError(
            f"unknown image encoding {spec!r}; valid image encodings: {', '.join(IMAGE_ENCODING_NAMES)}"
        )
    return factory(spec)
