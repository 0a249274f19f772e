"""Column encodings a user defines, registered by name (mosaicml-streaming's ``_encodings[name] = Cls``).

Design note: upstream keeps its encodings in a module-level dict that user code extends; code written for it
does ``_encodings["uint4"] = UInt4`` where ``UInt4`` has ``encode(obj) -> bytes``, ``decode(data) -> obj``
and, for fixed-size values, an int ``size``. This registry is the one process-wide table of such names (a
registry is global by nature, like ``codecs``); ``register_encoding`` adds one and
``streaming.format.encodings`` looks names up here after its own. A built-in name cannot be replaced: files
written with it must keep decoding the same way. Each process (writer, reader, DataLoader worker) must
register the same names before it uses them, as with upstream; spawned workers re-import the user's module,
which registers again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streaming.format.encoding_base import Encoding

__all__ = ["UserEncoding", "register_encoding", "registered_encoding"]

_REGISTRY: dict[str, Callable[[], Any]] = {}


class UserEncoding(Encoding):
    """A registered encoding, adapted to this library's ``Encoding`` interface."""

    # `impl`: the user's object
    def __init__(self, name: str, impl: Any) -> None:
        super().__init__(name)
        self.impl = impl
        size = getattr(impl, "size", None)
        self.size = size if isinstance(size, int) and size > 0 else None

    def encode(self, obj: Any) -> bytes:
        return bytes(self.impl.encode(obj))

    def decode(self, data: bytes | memoryview) -> Any:
        return self.impl.decode(bytes(data))


def register_encoding(name: str, factory: Callable[[], Any], *, builtin: Callable[[str], bool]) -> None:
    """Register ``factory`` (a class or function with no arguments returning an object with ``encode`` and
    ``decode``) as column encoding ``name``.

    Raises:
        ValueError: ``name`` is empty, has a ``:``, or is a built-in encoding (``builtin(name)``).
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"custom encoding name {name!r}: use a non-empty name without ':'")
    if builtin(name):
        raise ValueError(f"custom encoding {name!r}: that is a built-in encoding and cannot be replaced")
    _REGISTRY[name] = factory


def registered_encoding(name: str) -> UserEncoding | None:
    """The registered encoding ``name`` (a fresh instance), or None."""
    factory = _REGISTRY.get(name)
    return None if factory is None else UserEncoding(name, factory())
