"""The column-encoding interface: the `Encoding` base class and the two errors every encoding raises.

Design note: a module of its own because two modules implement encodings: `streaming.format.encodings`
(scalars, text, ndarray, json, pkl; it also parses encoding strings) and `streaming.format.images` (the
Pillow-backed image encodings). Both import this one, so the parser can import the image encodings at
module level without a cycle.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Encoding", "EncodingError", "UnknownEncodingError", "type_name"]


class EncodingError(ValueError):
    """A value does not fit its column encoding (or stored bytes are not a valid encoding)."""


class UnknownEncodingError(ValueError):
    """An encoding string is not a valid MDS (or text-format) encoding."""


def type_name(obj: object) -> str:
    """The type of `obj` for error messages: `int` for builtins, `module.Class` otherwise."""
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class Encoding:
    """Encodes one column value to bytes and decodes it back.

    Attributes:
        name: The full encoding string as given, e.g. ``"ndarray:int32:2,3"``.
        size: Fixed byte size of every encoded value, or ``None`` if variable.
        safe: ``False`` only for ``pkl`` (decoding runs arbitrary code).
    """

    size: int | None = None
    safe: bool = True

    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, obj: Any) -> bytes:
        """Encode one value. Raises :class:`EncodingError` if it does not fit this encoding."""
        raise NotImplementedError

    def decode(self, data: bytes | memoryview) -> Any:
        """Decode one value from its bytes (typically a memoryview slice of a shard)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _need(self, obj: object, kind: type | tuple[type, ...], what: str) -> None:
        if not isinstance(obj, kind):
            raise EncodingError(f"encoding {self.name!r} needs {what}, got {type_name(obj)}")
