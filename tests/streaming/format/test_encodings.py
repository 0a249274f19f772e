"""MDS column encodings: golden bytes from the spec, round trips, error messages, property tests."""

from __future__ import annotations

import pickle
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streaming.format.encodings import (
    MDS_ENCODING_NAMES,
    TEXT_ENCODING_NAMES,
    Encoding,
    EncodingError,
    UnknownEncodingError,
    check_text_encoding,
    decode_text_value,
    encode_value,
    get_encoding,
    is_encoding_safe,
    is_valid_encoding,
    text_value_ok,
)
from tests.streaming.helpers import DTYPES

CODES = dict(zip(DTYPES, (8, 9, 16, 17, 18, 32, 33, 34, 64, 65, 66)))


def enc(spec: str, obj: object) -> bytes:
    return encode_value(get_encoding(spec), obj)


def dec(spec: str, data: bytes) -> object:
    # Readers hand decoders a memoryview slice of a read-only mmap; mimic that.
    return get_encoding(spec).decode(memoryview(b"\xee" + data + b"\xee")[1:-1])


# --------------------------------------------------------------------------- golden bytes (spec §2.3/§2.4)


def test_spec_example_sample_columns() -> None:
    assert enc("ndarray", np.array([0], np.int16)).hex() == "110401" + "0000"
    assert enc("ndarray:uint8:2,2", np.zeros((2, 2), np.uint8)).hex() == "00000000"
    assert enc("float32", 1.5).hex() == "0000c03f"
    assert enc("int", 0) == bytes(8)
    assert enc("str", "") == b""
    assert get_encoding("ndarray:uint8:2,2").size == 4
    assert get_encoding("ndarray").size is None


def test_golden_scalars_and_strings() -> None:
    assert enc("int", -2).hex() == "feffffffffffffff"
    assert enc("int", True) == (1).to_bytes(8, "little")  # bool is an int (as upstream)
    assert enc("uint16", 258).hex() == "0201"
    assert enc("int8", -1).hex() == "ff"
    assert enc("float64", 1.0).hex() == "000000000000f03f"
    assert enc("float16", 1.0).hex() == "003c"
    assert enc("str", "héllo") == "héllo".encode()
    assert enc("str_int", -42) == b"-42"
    assert enc("str_float", 0.1) == b"0.1"  # Python shortest repr
    assert enc("str_float", 1e22) == b"1e+22"
    assert enc("str_decimal", Decimal("1.2300")) == b"1.2300"
    assert enc("json", {"b": [1, 2.5, None], "a": "x"}) == b'{"b": [1, 2.5, null], "a": "x"}'
    assert enc("json", np.arange(3)) == b"[0, 1, 2]"
    assert enc("pkl", {"a": 1}) == pickle.dumps({"a": 1})
    assert enc("bytes", b"\x00\x01") == b"\x00\x01"


@pytest.mark.parametrize("dtype", DTYPES)
def test_golden_ndarray_variants(dtype: str) -> None:
    arr = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    values = arr.tobytes()
    code = bytes([CODES[dtype]])
    shape_header = bytes([(2 << 2) | 0, 2, 3])
    assert enc("ndarray", arr) == code + shape_header + values
    assert enc(f"ndarray:{dtype}", arr) == shape_header + values
    assert enc(f"ndarray:{dtype}:2,3", arr) == values
    assert get_encoding(f"ndarray:{dtype}:2,3").size == 6 * np.dtype(dtype).itemsize


@pytest.mark.parametrize(
    ("dim", "k", "fmt"), [(255, 0, "<B"), (256, 1, "<H"), (65535, 1, "<H"), (65536, 2, "<I")]
)
def test_shape_header_width(dim: int, k: int, fmt: str) -> None:
    arr = np.zeros((1, dim), np.uint8)
    data = enc("ndarray:uint8", arr)
    assert data[0] == (2 << 2) | k
    width = np.dtype(fmt).itemsize
    assert np.frombuffer(data[1 : 1 + 2 * width], fmt).tolist() == [1, dim]
    assert dec("ndarray:uint8", data).shape == (1, dim)


def test_shape_header_uint64() -> None:
    # Encoding a > 4 GiB array is too slow; check the header writer and the decoder on a crafted value.
    from streaming.format.encodings import _shape_header

    head = _shape_header((1, 2**32), "ndarray")
    assert head == bytes([(2 << 2) | 3]) + np.array([1, 2**32], "<u8").tobytes()


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["dyn", "dtype", "static"])
def test_ndarray_round_trip_zero_copy(dtype: str, variant: str) -> None:
    arr = (np.arange(24) * 3 - 7).astype(dtype).reshape(2, 3, 4)
    spec = {"dyn": "ndarray", "dtype": f"ndarray:{dtype}", "static": f"ndarray:{dtype}:2,3,4"}[variant]
    buf = memoryview(enc(spec, arr))
    out = get_encoding(spec).decode(buf)
    assert out.dtype == arr.dtype and out.shape == arr.shape and out.tobytes() == arr.tobytes()
    assert not out.flags.writeable
    assert np.shares_memory(out, np.frombuffer(buf, np.uint8))  # a view, not a copy


def test_ndarray_from_writable_buffer_is_read_only() -> None:
    out = get_encoding("ndarray:int32:2").decode(memoryview(bytearray(8)))
    assert not out.flags.writeable


def test_ndarray_big_endian_and_non_contiguous_inputs() -> None:
    arr = np.arange(6, dtype=">i4").reshape(2, 3)
    assert enc("ndarray:int32", arr) == enc("ndarray:int32", arr.astype("<i4"))
    assert dec("ndarray", enc("ndarray", arr)).tolist() == arr.tolist()
    t = np.arange(6, dtype=np.float32).reshape(2, 3).T
    assert dec("ndarray", enc("ndarray", t)).tolist() == t.tolist()


def test_ndarray_max_ndim() -> None:
    arr = np.zeros((1,) * 63, np.uint8)
    assert dec("ndarray", enc("ndarray", arr)).shape == arr.shape
    with pytest.raises(EncodingError, match="64 dims; at most 63"):
        enc("ndarray", np.zeros((1,) * 64, np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_round_trip(dtype: str) -> None:
    out = dec(dtype, enc(dtype, 7))
    assert type(out) is np.dtype(dtype).type and out == 7
    assert get_encoding(dtype).size == np.dtype(dtype).itemsize


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ("bytes", b"\x00abc"),
        ("str", "héllo\n"),
        ("int", -(2**63)),
        ("int", 2**63 - 1),
        ("str_int", 10**40),
        ("str_float", -0.0),
        ("str_float", float("inf")),
        ("str_decimal", Decimal("-1.50E+3")),
        ("json", {"a": [1, {"b": None}], "c": 1.5}),
        ("json", "text"),
        ("pkl", {"set": {1, 2}, "t": (1, "x")}),
    ],
)
def test_round_trip(spec: str, value: object) -> None:
    out = dec(spec, enc(spec, value))
    assert out == value and type(out) is type(value)


def test_int_decodes_to_python_int() -> None:
    assert type(dec("int", enc("int", 5))) is int


# --------------------------------------------------------------------------- pass-through and sizes


def test_bytes_pass_through_for_any_encoding() -> None:
    for spec in ("str", "json", "pkl", "jpeg", "ndarray", "list[pil]", "jpeg_array"):
        assert encode_value(get_encoding(spec), b"\xff\xd8raw") == b"\xff\xd8raw"
    assert enc("int", b"12345678") == b"12345678"
    assert enc("ndarray:uint8:2,2", b"abcd") == b"abcd"
    out = enc("str", np.bytes_(b"np"))  # bytes subclasses pass through too (isinstance, as upstream)
    assert out == b"np" and type(out) is bytes


def test_fixed_size_pass_through_length_mismatch() -> None:
    with pytest.raises(
        EncodingError, match="pre-encoded bytes value is 3 bytes but encoding 'int' is fixed at 8"
    ):
        enc("int", b"abc")
    with pytest.raises(EncodingError, match=r"is fixed at 4 bytes"):
        enc("ndarray:uint8:2,2", b"abcde")


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("spec", "value", "match"),
    [
        ("int", np.int64(3), r"needs a Python int, got numpy.int64; convert with int\(x\)"),
        ("int", 1.0, "needs a Python int, got float"),
        ("int", 2**63, "does not fit in int64"),
        ("str", 5, "needs a str, got int"),
        ("str", "\ud800", "not valid UTF-8"),
        ("bytes", "x", "needs bytes, got str"),
        ("str_int", True, "needs a Python int, got bool"),
        ("str_float", 1, "needs a Python float, got int"),
        ("str_decimal", 1.5, "needs a decimal.Decimal"),
        ("uint8", 300, "cannot store 300 as uint8"),
        ("float32", "abc", "cannot store 'abc' as float32"),
        ("float16", 1e10, "cannot store"),
        ("json", {1, 2}, "not JSON-serializable"),
        ("pkl", lambda: 1, "cannot pickle"),
        ("ndarray", [1, 2], "needs a numpy.ndarray, got list"),
        ("ndarray", np.zeros(2, bool), "array dtype bool is not supported"),
        ("ndarray", np.zeros(2, np.complex64), "not supported"),
        ("ndarray", np.array(5, np.int32), "0-d arrays are not allowed; use the 'int32' encoding"),
        ("ndarray", np.zeros((2, 0), np.int32), r"empty array of shape \(2, 0\)"),
        ("ndarray:float32", np.zeros(2, np.int32), "array has dtype int32 but the column is ndarray:float32"),
        (
            "ndarray:float32:3,2",
            np.zeros((2, 3), np.float32),
            r"shape \(2, 3\) does not match declared shape \(3, 2\)",
        ),
    ],
)
def test_encode_errors(spec: str, value: object, match: str) -> None:
    with pytest.raises(EncodingError, match=match):
        enc(spec, value)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("nope", "unknown column encoding 'nope'; valid encodings: bytes, str, int"),
        ("", "unknown column encoding ''"),
        ("str:utf8", "only ndarray takes a ':' configuration"),
        ("jpeg:90", "only ndarray takes"),
        ("ndarray:bool", "ndarray dtype 'bool' is not one of uint8"),
        ("ndarray::2,3", "ndarray dtype '' is not one of"),
        ("ndarray:int32:", "empty shape"),
        ("ndarray:int32:2,x", "shape '2,x' must be comma-separated positive integers"),
        ("ndarray:int32:2,0", r"every dim of shape \(2, 0\) must be >= 1"),
        ("ndarray:int32:2:3", "must be comma-separated"),
        ("list[str]", "unknown column encoding"),
    ],
)
def test_unknown_encodings(spec: str, match: str) -> None:
    with pytest.raises(UnknownEncodingError, match=match):
        get_encoding(spec)
    assert not is_valid_encoding(spec)


def test_non_string_encoding() -> None:
    with pytest.raises(UnknownEncodingError, match="must be a str"):
        get_encoding(["int"])  # type: ignore[arg-type]


def test_unknown_error_lists_ndarray_forms() -> None:
    with pytest.raises(UnknownEncodingError, match=r"ndarray\[:<dtype>\[:<d0>,<d1>,\.\.\.\]\]"):
        get_encoding("float")


@pytest.mark.parametrize(
    ("spec", "data", "match"),
    [
        ("ndarray", b"\x07\x04\x01\x00", "unknown dtype code 7"),
        ("ndarray", b"\x08\x00\x00", "shape header says 0 dims"),
        ("ndarray", b"\x08\x04\x02\x00", r"1 value bytes for shape \(2,\) of uint8"),
        ("ndarray:int32:2", b"\x00" * 12, "12 value bytes for shape"),
        ("str_decimal", b"abc", "not a decimal"),
    ],
)
def test_decode_errors(spec: str, data: bytes, match: str) -> None:
    with pytest.raises(EncodingError, match=match):
        dec(spec, data)


# --------------------------------------------------------------------------- registry


def test_names_sizes_and_safety() -> None:
    for name in MDS_ENCODING_NAMES:
        encoding = get_encoding(name)
        assert isinstance(encoding, Encoding) and encoding.name == name
        assert encoding.safe is (name != "pkl")
        assert is_encoding_safe(name) is (name != "pkl")
    fixed = {"int": 8, **{d: np.dtype(d).itemsize for d in DTYPES}}
    for name in MDS_ENCODING_NAMES:
        assert get_encoding(name).size == fixed.get(name)
    assert get_encoding("ndarray:int16:3").name == "ndarray:int16:3"
    assert get_encoding("ndarray:") is not None  # upstream parses an empty config as dynamic
    assert get_encoding("int") is get_encoding("int")  # cached
    assert "jpegarray" in MDS_ENCODING_NAMES and "list[png]" in MDS_ENCODING_NAMES


# --------------------------------------------------------------------------- text formats


def test_text_encodings() -> None:
    assert TEXT_ENCODING_NAMES == ("str", "int", "float")
    for spec in TEXT_ENCODING_NAMES:
        check_text_encoding(spec)
    with pytest.raises(
        UnknownEncodingError, match="unknown text column encoding 'bytes'; .* str, int, float"
    ):
        check_text_encoding("bytes")
    assert text_value_ok("int", 3) and not text_value_ok("int", True) and not text_value_ok("int", 3.0)
    assert not text_value_ok("int", np.int64(3))
    assert text_value_ok("float", 3.0) and not text_value_ok("float", 3)
    assert text_value_ok("str", "x") and not text_value_ok("str", b"x")
    with pytest.raises(UnknownEncodingError):
        text_value_ok("json", {})
    assert decode_text_value("int", "-12") == -12 and type(decode_text_value("int", "7")) is int
    assert decode_text_value("float", "1e3") == 1000.0
    assert decode_text_value("str", "a b") == "a b"
    with pytest.raises(EncodingError, match="cell 'x1' is not a valid int"):
        decode_text_value("int", "x1")
    with pytest.raises(UnknownEncodingError):
        decode_text_value("pkl", "x")


# --------------------------------------------------------------------------- properties

_dtype_st = st.sampled_from(DTYPES).map(np.dtype)
_array_st = _dtype_st.flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=6))
)


@settings(max_examples=150, deadline=None)
@given(arr=_array_st, variant=st.sampled_from(["dyn", "dtype", "static"]))
def test_property_ndarray_round_trip_bit_exact(arr: np.ndarray, variant: str) -> None:
    shape = ",".join(map(str, arr.shape))
    spec = {
        "dyn": "ndarray",
        "dtype": f"ndarray:{arr.dtype.name}",
        "static": f"ndarray:{arr.dtype.name}:{shape}",
    }
    spec_str = spec[variant]
    out = dec(spec_str, enc(spec_str, arr))
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()  # bit-exact, NaN payloads included


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(),
    raw=st.binary(),
    num=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    big=st.integers(),
    real=st.floats(allow_nan=False),
)
def test_property_scalars_round_trip(text: str, raw: bytes, num: int, big: int, real: float) -> None:
    assert dec("str", enc("str", text)) == text
    assert dec("bytes", enc("bytes", raw)) == raw
    assert dec("int", enc("int", num)) == num
    assert dec("int64", enc("int64", num)) == num
    assert dec("str_int", enc("str_int", big)) == big
    assert dec("str_float", enc("str_float", real)) == real
    assert dec("float64", enc("float64", real)) == real
    assert dec("json", enc("json", [text, num, real])) == [text, num, real]
