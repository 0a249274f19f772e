"""Sample values for every MDS encoding, the numeric dtypes, and a comparison that understands arrays
and images."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import numpy as np

DTYPES = (
    "uint8",
    "int8",
    "uint16",
    "int16",
    "float16",
    "uint32",
    "int32",
    "float32",
    "uint64",
    "int64",
    "float64",
)
"""The numeric MDS encodings (each also an `ndarray:<dtype>`), in the spec's code order."""


def _image(mode: str = "RGB", size: tuple[int, int] = (5, 4), seed: int = 0) -> Any:
    from PIL import Image

    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    arr = rng.integers(0, 256, size=(size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if channels == 1 else arr, mode=mode)


def _jpeg_bytes(seed: int) -> bytes:
    buf = io.BytesIO()
    _image(seed=seed).save(buf, format="JPEG")
    return buf.getvalue()


def every_encoding_sample(i: int = 0) -> tuple[dict[str, str], dict[str, Any]]:
    """Columns covering every encoding, and one sample for them (varied by ``i``)."""
    columns: dict[str, str] = {}
    sample: dict[str, Any] = {}

    def add(name: str, enc: str, value: Any) -> None:
        columns[name] = enc
        sample[name] = value

    add("bytes", "bytes", bytes([i % 256, 1, 2]))
    add("str", "str", f"héllo {i}")
    add("int", "int", -5 - i)
    for dt in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"):
        add(dt, dt, (i + 7) % 100)
    for dt in ("float16", "float32", "float64"):
        add(dt, dt, 1.5 + i)
    add("str_int", "str_int", 42 + i)
    add("str_float", "str_float", 0.1 + i)
    add("str_decimal", "str_decimal", Decimal("1.25") + i)
    add("json", "json", {"a": [1, 2, i], "b": "x"})
    add("pkl", "pkl", {"tuple": (1, 2), "i": i})
    add("nd_dyn", "ndarray", np.arange(6 + i, dtype=np.int32).reshape(-1, 1))
    add("nd_dtype", "ndarray:float32", np.linspace(0, 1, 5 + i, dtype=np.float32))
    add("nd_shape", "ndarray:int16:2,3", np.arange(6, dtype=np.int16).reshape(2, 3) + i)
    add("nd_u64", "ndarray:uint64", np.array([[2**63 + i]], dtype=np.uint64))
    add("pil", "pil", _image("RGBA", seed=i))
    add("png", "png", _image("L", seed=i))
    add("jpeg", "jpeg", _image("RGB", seed=i))
    add("list_pil", "list[pil]", [_image("RGB", seed=i), _image("L", size=(2, 2))])
    add("list_png", "list[png]", [_image("RGB", seed=i + 1)])
    add("list_jpeg", "list[jpeg]", [_image("RGB", seed=i + 2), _image("RGB", seed=i + 3)])
    add("jpeg_array", "jpeg_array", [_jpeg_bytes(i), _jpeg_bytes(i + 1)])
    return columns, sample


def assert_same(expected: Any, actual: Any, *, encoding: str = "") -> None:
    """Equality for decoded values; lossy JPEG compares size and mode only."""
    from PIL import Image

    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, Image.Image):
        assert isinstance(actual, Image.Image)
        assert actual.size == expected.size and actual.mode == expected.mode
        if "jpeg" not in encoding:
            assert actual.tobytes() == expected.tobytes()
    elif encoding == "jpeg_array":
        assert [img.size for img in actual] == [Image.open(io.BytesIO(b)).size for b in expected]
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert_same(e, a, encoding=encoding)
    elif isinstance(expected, float):
        assert float(actual) == np.asarray(expected, dtype=getattr(actual, "dtype", np.float64)).item()
    else:
        assert actual == expected
