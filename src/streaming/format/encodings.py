"""MDS column encodings (byte-exact with mosaicml-streaming) and the text-format column types.

Each column of an MDS shard names an encoding string such as ``"int"``, ``"str"`` or
``"ndarray:float32:2,3"``; :func:`get_encoding` parses it once (cached) into an :class:`Encoding` object whose
``encode``/``decode`` turn one column value into bytes and back. The image encodings live in
``streaming.format.images`` so that Pillow stays an optional dependency.

Design tradeoff: the write side validates hard (wrong types, dtypes, shapes and out-of-range values raise
:class:`EncodingError` naming the problem, where upstream often writes silently wrong bytes), while the read
side does as little as possible: ``decode`` receives a ``memoryview`` slice of a memory-mapped shard and
returns zero-copy read-only numpy views for ``ndarray`` columns. Decoders only check what is needed to not
return garbage (lengths, dtype codes); they trust the shard layout for everything else.
"""

from __future__ import annotations

import functools
import json
import pickle
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from streaming.format import custom_encodings
from streaming.format.custom_encodings import registered_encoding
from streaming.format.encoding_base import Encoding, EncodingError, UnknownEncodingError, type_name
from streaming.format.images import IMAGE_ENCODING_NAMES, get_image_encoding

__all__ = [
    "MDS_ENCODING_NAMES",
    "TEXT_ENCODING_NAMES",
    "Encoding",
    "EncodingError",
    "UnknownEncodingError",
    "check_text_encoding",
    "decode_text_value",
    "encode_value",
    "get_encoding",
    "is_encoding_safe",
    "is_valid_encoding",
    "register_encoding",
    "text_value_ok",
]

_SCALAR_NAMES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
_FLOAT_NAMES = ("float16", "float32", "float64")

MDS_ENCODING_NAMES: tuple[str, ...] = (
    "bytes",
    "str",
    "int",
    *_SCALAR_NAMES,
    *_FLOAT_NAMES,
    "str_int",
    "str_float",
    "str_decimal",
) + ("json", "pkl", "ndarray", *IMAGE_ENCODING_NAMES)
"""Base names of every MDS encoding (``ndarray`` also takes ``:dtype[:d0,d1,...]``)."""

TEXT_ENCODING_NAMES: tuple[str, ...] = ("str", "int", "float")
"""Column encodings of the JSONL / CSV / TSV / XSV formats."""

# ndarray value dtypes and their one-byte codes (spec §2.4).
_DTYPE_CODES = {
    "uint8": 8,
    "int8": 9,
    "uint16": 16,
    "int16": 17,
    "float16": 18,
    "uint32": 32,
    "int32": 33,
    "float32": 34,
    "uint64": 64,
    "int64": 65,
    "float64": 66,
}


def _code_table() -> tuple[np.dtype | None, ...]:
    table: list[np.dtype | None] = [None] * 256
    for name, code in _DTYPE_CODES.items():
        table[code] = np.dtype(name).newbyteorder("<")
    return tuple(table)


# dtype code byte -> little-endian dtype (None: invalid code)
_CODE_DTYPES = _code_table()
# (dtype.kind, itemsize) -> code: dtype.name is slow (microseconds) and byte-order blind anyway.
_KIND_SIZE_CODES = {(np.dtype(n).kind, np.dtype(n).itemsize): c for n, c in _DTYPE_CODES.items()}
# shape-header k -> struct code of uint8/16/32/64 dims
_SHAPE_CHARS = "BHIQ"
_MAX_NDIM = 63


class _Bytes(Encoding):
    def encode(self, obj: Any) -> bytes:
        self._need(obj, (bytes, bytearray, memoryview), "bytes")
        return bytes(obj)

    def decode(self, data: bytes | memoryview) -> bytes:
        return bytes(data)


class _Str(Encoding):
    def encode(self, obj: Any) -> bytes:
        self._need(obj, str, "a str")
        try:
            return obj.encode("utf-8")
        except UnicodeEncodeError as err:
            raise EncodingError(f"encoding {self.name!r}: string is not valid UTF-8 text ({err})") from None

    def decode(self, data: bytes | memoryview) -> str:
        return str(data, "utf-8")


class _Int(Encoding):
    size = 8

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, int):
            hint = "; convert with int(x) or use an 'int64' column" if isinstance(obj, np.integer) else ""
            raise EncodingError(f"encoding 'int' needs a Python int, got {type_name(obj)}{hint}")
        try:
            return obj.to_bytes(8, "little", signed=True)
        except OverflowError:
            raise EncodingError(f"encoding 'int': {obj} does not fit in int64; use 'str_int'") from None

    def decode(self, data: bytes | memoryview) -> int:
        return int.from_bytes(data, "little", signed=True)


class _Scalar(Encoding):
    """A numpy scalar type; the value is cast to the dtype (no type validation, as upstream)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._dtype = np.dtype(name).newbyteorder("<")
        self._type = self._dtype.type
        self._native = self._dtype == np.dtype(name)
        self.size = self._dtype.itemsize
        self._fmax = float(np.finfo(self._dtype).max) if self._dtype.kind == "f" else None

    def encode(self, obj: Any) -> bytes:
        kind = type(obj)
        fmax = self._fmax
        # Fast path: Python ints into int dtypes (numpy raises OverflowError itself) and in-range Python
        # numbers into float dtypes. Everything else goes through numpy with overflow/invalid errors on.
        if self._native and (
            (kind is int and fmax is None)
            or (fmax is not None and (kind is float or kind is int) and not abs(obj) > fmax)
        ):
            try:
                return self._type(obj).tobytes()
            except OverflowError as err:
                raise EncodingError(
                    f"encoding {self.name!r}: cannot store {obj!r} as {self.name} ({err})"
                ) from None
        try:
            with np.errstate(over="raise", invalid="raise"):
                return self._type(obj).astype(self._dtype).tobytes()
        except (TypeError, ValueError, OverflowError, FloatingPointError) as err:
            raise EncodingError(
                f"encoding {self.name!r}: cannot store {obj!r} as {self.name} ({err})"
            ) from None

    def decode(self, data: bytes | memoryview) -> Any:
        return np.frombuffer(data, self._dtype)[0]


class _StrInt(Encoding):
    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, int) or isinstance(obj, bool):
            raise EncodingError(f"encoding 'str_int' needs a Python int, got {type_name(obj)}")
        return str(obj).encode("utf-8")

    def decode(self, data: bytes | memoryview) -> int:
        return int(str(data, "utf-8"))


class _StrFloat(Encoding):
    def encode(self, obj: Any) -> bytes:
        self._need(obj, float, "a Python float")
        return repr(float(obj)).encode("utf-8")

    def decode(self, data: bytes | memoryview) -> float:
        return float(str(data, "utf-8"))


class _StrDecimal(Encoding):
    def encode(self, obj: Any) -> bytes:
        self._need(obj, Decimal, "a decimal.Decimal")
        return str(obj).encode("utf-8")

    def decode(self, data: bytes | memoryview) -> Decimal:
        try:
            return Decimal(str(data, "utf-8"))
        except InvalidOperation:
            raise EncodingError(
                f"encoding 'str_decimal': stored bytes {bytes(data)!r} are not a decimal"
            ) from None


class _Pickle(Encoding):
    safe = False

    def encode(self, obj: Any) -> bytes:
        try:
            return pickle.dumps(obj)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            raise EncodingError(f"encoding 'pkl': cannot pickle {type_name(obj)} ({err})") from None

    def decode(self, data: bytes | memoryview) -> Any:
        return pickle.loads(data)


class _JSON(Encoding):
    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, np.ndarray):
            obj = obj.tolist()
        try:
            return json.dumps(obj).encode("utf-8")
        except (TypeError, ValueError) as err:
            raise EncodingError(f"encoding 'json': value is not JSON-serializable ({err})") from None

    def decode(self, data: bytes | memoryview) -> Any:
        return json.loads(str(data, "utf-8"))


class _NDArray(Encoding):
    """``ndarray[:dtype[:d0,d1,...]]``: [dtype code if dynamic][shape header if dynamic][C-order values]."""

    def __init__(self, name: str, *, dtype: str | None, shape: tuple[int, ...] | None) -> None:
        super().__init__(name)
        self.dtype = np.dtype(dtype).newbyteorder("<") if dtype else None
        self.shape = shape
        self._key = (self.dtype.kind, self.dtype.itemsize) if self.dtype is not None else None
        if self.dtype is not None and shape is not None:
            self.size = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize

    def encode(self, obj: Any) -> bytes:
        self._need(obj, np.ndarray, "a numpy.ndarray")
        dt = obj.dtype
        key = (dt.kind, dt.itemsize)
        code = _KIND_SIZE_CODES.get(key)
        if code is None:
            raise EncodingError(
                f"encoding {self.name!r}: array dtype {dt} is not supported; use "
                f"one of {', '.join(_DTYPE_CODES)}"
            )
        if self._key is not None and key != self._key:
            raise EncodingError(f"array has dtype {dt.name} but the column is {self.name}")
        if obj.ndim == 0:
            raise EncodingError(
                f"encoding {self.name!r}: 0-d arrays are not allowed; use the {dt.name!r} encoding"
            )
        if obj.size == 0:
            raise EncodingError(
                f"encoding {self.name!r}: empty array of shape {obj.shape} (every dim must be >= 1)"
            )
        if dt.byteorder == ">":
            obj = obj.astype(dt.newbyteorder("<"))
        parts = [] if self.dtype is not None else [bytes((code,))]
        if self.shape is None:
            parts.append(_shape_header(obj.shape, self.name))
        elif obj.shape != self.shape:
            raise EncodingError(
                f"shape {obj.shape} does not match declared shape {self.shape} of {self.name}"
            )
        parts.append(obj.tobytes())
        return b"".join(parts)

    def decode(self, data: bytes | memoryview) -> np.ndarray:
        pos = 0
        dtype = self.dtype
        if dtype is None:
            dtype = _CODE_DTYPES[data[0]]
            if dtype is None:
                raise EncodingError(f"encoding {self.name!r}: corrupt value, unknown dtype code {data[0]}")
            pos = 1
        shape = self.shape
        if shape is None:
            head = data[pos]
            ndim, k = head >> 2, head & 3
            if ndim == 0:
                raise EncodingError(f"encoding {self.name!r}: corrupt value, shape header says 0 dims")
            shape = struct.unpack_from(f"<{ndim}{_SHAPE_CHARS[k]}", data, pos + 1)
            pos += 1 + ndim * (1 << k)
        count = 1
        for dim in shape:
            count *= dim
        if len(data) - pos != count * dtype.itemsize:
            raise EncodingError(
                f"encoding {self.name!r}: corrupt value, {len(data) - pos} value bytes for shape "
                f"{tuple(shape)} of {dtype.name}"
            )
        arr = np.ndarray(shape, dtype, data, pos)
        if arr.flags.writeable:
            arr.flags.writeable = False
        return arr


def _shape_header(shape: tuple[int, ...], name: str) -> bytes:
    """One byte ``(ndim << 2) | k`` then the dims as the smallest unsigned type (k: 0=u8 .. 3=u64)."""
    ndim = len(shape)
    if ndim > _MAX_NDIM:
        raise EncodingError(f"encoding {name!r}: array has {ndim} dims; at most {_MAX_NDIM} are allowed")
    top = max(shape)
    k = 0 if top < 1 << 8 else 1 if top < 1 << 16 else 2 if top < 1 << 32 else 3
    return struct.pack(f"<B{ndim}{_SHAPE_CHARS[k]}", (ndim << 2) | k, *shape)


_SIMPLE: dict[str, type[Encoding]] = {
    "bytes": _Bytes,
    "str": _Str,
    "int": _Int,
    "str_int": _StrInt,
    "str_float": _StrFloat,
    "str_decimal": _StrDecimal,
    "pkl": _Pickle,
    "json": _JSON,
    **{n: _Scalar for n in _SCALAR_NAMES + _FLOAT_NAMES},
}


def _valid_forms() -> str:
    names = [n for n in MDS_ENCODING_NAMES if n != "ndarray"]
    return ", ".join(names) + ", ndarray[:<dtype>[:<d0>,<d1>,...]]"


def _parse_ndarray(spec: str, config: str | None) -> _NDArray:
    if not config:
        return _NDArray(spec, dtype=None, shape=None)
    dtype, _, dims = config.partition(":")
    if dtype not in _DTYPE_CODES:
        raise UnknownEncodingError(
            f"invalid encoding {spec!r}: ndarray dtype {dtype!r} is not one of {', '.join(_DTYPE_CODES)}"
        )
    if not dims:
        if config.endswith(":"):
            raise UnknownEncodingError(
                f"invalid encoding {spec!r}: empty shape; write ndarray:{dtype}:<d0>,<d1>,..."
            )
        return _NDArray(spec, dtype=dtype, shape=None)
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise UnknownEncodingError(
            f"invalid encoding {spec!r}: shape {dims!r} must be comma-separated positive integers, e.g. 2,3"
        ) from None
    if any(d < 1 for d in shape):
        raise UnknownEncodingError(f"invalid encoding {spec!r}: every dim of shape {shape} must be >= 1")
    return _NDArray(spec, dtype=dtype, shape=shape)


@functools.lru_cache(maxsize=512)
def _cached_encoding(spec: str) -> Encoding:
    cls = _SIMPLE.get(spec)
    if cls is not None:
        return cls(spec)
    name, sep, config = spec.partition(":")
    if name == "ndarray":
        return _parse_ndarray(spec, config if sep else None)
    if name in IMAGE_ENCODING_NAMES and not sep:
        return get_image_encoding(spec)
    if name in MDS_ENCODING_NAMES:
        raise UnknownEncodingError(f"invalid encoding {spec!r}: only ndarray takes a ':' configuration")
    user = registered_encoding(spec)
    if user is not None:
        return user
    raise UnknownEncodingError(
        f"unknown column encoding {spec!r}; valid encodings: {_valid_forms()} (or one registered with "
        "streaming.format.encodings.register_encoding)"
    )


def _is_builtin(name: str) -> bool:
    return name in _SIMPLE or name in MDS_ENCODING_NAMES or name in IMAGE_ENCODING_NAMES or name == "ndarray"


def register_encoding(name: str, factory: Callable[[], Any]) -> None:
    """Register a custom column encoding (see ``streaming.format.custom_encodings``); mosaicml-streaming's
    ``_encodings[name] = Cls`` does the same through ``streaming.base.format.mds.encodings``."""
    custom_encodings.register_encoding(name, factory, builtin=_is_builtin)
    _cached_encoding.cache_clear()


def get_encoding(spec: str) -> Encoding:
    """Parse an MDS encoding string ``name[:config]`` into an :class:`Encoding` (cached).

    Args:
        spec: Encoding string, e.g. ``"str"``, ``"float32"``, ``"ndarray:uint8:2,2"``, ``"jpeg"``.

    Returns:
        The (shared, stateless) encoding object.

    Raises:
        UnknownEncodingError: The string is not a valid MDS encoding; the message lists the valid ones.
    """
    if not isinstance(spec, str):
        raise UnknownEncodingError(f"column encoding must be a str, got {type_name(spec)}: {spec!r}")
    return _cached_encoding(spec)


def is_valid_encoding(spec: str) -> bool:
    """Whether ``spec`` is a valid MDS encoding string."""
    try:
        get_encoding(spec)
    except UnknownEncodingError:
        return False
    return True


def is_encoding_safe(spec: str) -> bool:
    """Whether decoding ``spec`` cannot run arbitrary code (``False`` only for ``pkl``)."""
    return spec.partition(":")[0] != "pkl"


def encode_value(encoding: Encoding, obj: Any) -> bytes:
    """Encode one column value, storing an already-``bytes`` value verbatim (pre-encoded pass-through).

    Args:
        encoding: The column encoding.
        obj: The value; ``bytes`` are written as given whatever the encoding (e.g. pre-encoded JPEGs).

    Returns:
        The encoded bytes.

    Raises:
        EncodingError: The value does not fit the encoding,
            or a fixed-size column got bytes of another length.
    """
    # includes subclasses such as numpy.bytes_, as upstream
    passthrough = isinstance(obj, bytes)
    data = bytes(obj) if passthrough else encoding.encode(obj)
    size = encoding.size
    if size is not None and len(data) != size:
        what = "pre-encoded bytes value" if passthrough else "encoded value"
        raise EncodingError(
            f"{what} is {len(data)} bytes but encoding {encoding.name!r} is fixed at {size} bytes"
        )
    return data


def check_text_encoding(spec: str) -> None:
    """Raise :class:`UnknownEncodingError` unless ``spec`` is a JSONL/CSV/TSV/XSV encoding
    (str, int, float)."""
    if spec not in TEXT_ENCODING_NAMES:
        raise UnknownEncodingError(
            f"unknown text column encoding {spec!r}; JSONL/CSV/TSV/XSV columns take one of "
            f"{', '.join(TEXT_ENCODING_NAMES)} (use MDS for other types)"
        )


def text_value_ok(spec: str, obj: Any) -> bool:
    """Whether ``obj`` has the Python type of text encoding ``spec`` (``bool`` is not an ``int`` here)."""
    if spec == "str":
        return isinstance(obj, str)
    if spec == "int":
        return isinstance(obj, int) and not isinstance(obj, bool)
    if spec == "float":
        return isinstance(obj, float)
    check_text_encoding(spec)
    return False


def decode_text_value(spec: str, text: str) -> Any:
    """Convert one CSV/TSV/XSV cell to the column's Python type.

    Raises:
        EncodingError: The cell is not a valid value of that type.
        UnknownEncodingError: ``spec`` is not a text encoding.
    """
    if spec == "str":
        return text
    if spec not in ("int", "float"):
        check_text_encoding(spec)
    try:
        return int(text) if spec == "int" else float(text)
    except ValueError:
        raise EncodingError(f"cell {text!r} is not a valid {spec}") from None
