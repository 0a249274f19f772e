"""``streaming.base.format.mds.encodings`` (mosaicml-streaming's path): custom encodings and the MDS helpers.

Code written for upstream registers its own column encodings by adding a class to ``_encodings``; here that
dict registers them with ``streaming.format.encodings.register_encoding``. ``Encoding`` is a base class with
upstream's interface (``encode``, ``decode``, optional ``size``) for such classes to subclass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from streaming.format.encodings import MDS_ENCODING_NAMES, get_encoding, is_encoding_safe, is_valid_encoding
from streaming.format.encodings import register_encoding as _register

__all__ = [
    "Encoding",
    "get_mds_encoded_size",
    "get_mds_encodings",
    "is_mds_encoding",
    "is_mds_encoding_safe",
    "mds_decode",
    "mds_encode",
]


class Encoding(ABC):
    """Base class of a custom MDS column encoding (upstream's interface)."""

    size: int | None = None

    @abstractmethod
    def encode(self, obj: Any) -> bytes:
        """Encode one value."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """Decode one value."""


class _Registry(dict[str, Callable[[], Any]]):
    """``_encodings``: assigning a name registers the encoding for every reader and writer in this process."""

    def __setitem__(self, name: str, factory: Callable[[], Any]) -> None:
        _register(name, factory)
        super().__setitem__(name, factory)


_encodings = _Registry()


def get_mds_encodings() -> set[str]:
    """The built-in MDS encoding names and the registered ones."""
    return set(MDS_ENCODING_NAMES) | set(_encodings)


def is_mds_encoding(encoding: str) -> bool:
    """Whether ``encoding`` is a valid MDS encoding string."""
    return is_valid_encoding(encoding)


def is_mds_encoding_safe(encoding: str) -> bool:
    """Whether decoding ``encoding`` cannot run arbitrary code."""
    return is_encoding_safe(encoding)


def mds_encode(encoding: str, obj: Any) -> bytes:
    """``obj`` encoded as ``encoding``."""
    return get_encoding(encoding).encode(obj)


def mds_decode(encoding: str, data: bytes) -> Any:
    """``data`` decoded as ``encoding``."""
    return get_encoding(encoding).decode(data)


def get_mds_encoded_size(encoding: str) -> int | None:
    """The fixed byte size of ``encoding``'s values (None: variable)."""
    return get_encoding(encoding).size
