"""Hostile values for the fuzz suite (issue 39): the building blocks every entry point's strategy draws from.

Numbers at the edges of every integer width, strings that are paths out of a folder, control characters or
interpolations, JSON nested past the recursion limit, and byte-level edits of a file (truncate, flip,
overwrite with a little-endian size, insert, append).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import strategies as st

EDGE_INTS = [
    0,
    1,
    -1,
    2,
    7,
    255,
    256,
    -(2**31),
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    2**64,
    10**12,
    10**30,
    -(10**30),
]
NAMES = [
    "../{shard}",
    "../../{shard}",
    "{abs}/{shard}",
    "a/../../{shard}",
    "./../{shard}",
    "..",
    ".",
    "",
    "/",
    "//",
    "x\x00y",
    "C:{shard}",
    "..\\{shard}",
    "\\\\server\\share\\{shard}",
    "~/{shard}",
    "$HOME/{shard}",
    "sub/",
    "sub//x",
    "./x",
    "a\nb",
    "a" * 5000,
    "\u202e.mds",
    "{shard}",
]
STRINGS = [
    *NAMES,
    "${oc.env:FUZZ_API_TOKEN}",
    "${oc.env:HOME}",
    "${foo.bar}",
    "\\${x}",
    "${oc.create:{a:1}}",
    "???",
    "null",
    "NaN",
    "1e999",
    "-0",
    "0x10",
    "true",
    "ba",
    "10ba",
    "-5ba",
    "1ep",
    "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    "é" * 3,
    " ",
    "\t\r",
]


def integers() -> st.SearchStrategy[int]:
    return st.sampled_from(EDGE_INTS) | st.integers()


def floats() -> st.SearchStrategy[float]:
    return (
        st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324, 0.5]) | st.floats()
    )


def strings() -> st.SearchStrategy[str]:
    return st.sampled_from(STRINGS) | st.text(max_size=30)


def names() -> st.SearchStrategy[str]:
    """Shard or file names; `{abs}` and `{shard}` are filled in by the module (an absolute folder outside the
    input's, and the name of a valid planted copy)."""
    return st.sampled_from(NAMES) | st.text(max_size=20)


def scalars() -> st.SearchStrategy[Any]:
    return st.none() | st.booleans() | integers() | floats() | strings()


class Deep:
    """A JSON value nested `depth` levels; `dumps` writes it as text (`json.dumps` itself recurses)."""

    def __init__(self, depth: int, kind: str = "list") -> None:
        self.depth, self.kind = depth, kind
        self.token = f"@@deep-{depth}-{kind}@@"

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "0" + "]" * self.depth
        return '{"a": ' * self.depth + "0" + "}" * self.depth

    def __repr__(self) -> str:
        return f"Deep({self.depth}, {self.kind!r})"


def dumps(value: Any) -> str:  # noqa: ANN401
    """`json.dumps` of a value that may hold `Deep` parts."""
    deep: dict[str, Deep] = {}

    def token(obj: Any) -> str:  # noqa: ANN401
        if not isinstance(obj, Deep):
            raise TypeError(type(obj).__name__)
        deep[obj.token] = obj
        return obj.token

    text = json.dumps(value, default=token)
    for tok, obj in deep.items():
        text = text.replace(json.dumps(tok), obj.text())
    return text


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON-able value: scalars, small containers of them, or a deeply nested one."""
    tree = st.recursive(
        scalars(),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | strings(), inner, max_size=4)
        ),
        max_leaves=8,
    )
    return tree | st.builds(Deep, st.sampled_from([50, 200, 1100, 5000]), st.sampled_from(["list", "dict"]))


def json_documents() -> st.SearchStrategy[str]:
    """The text of a whole file: any JSON value, JSON nested past the recursion limit, or not JSON."""
    deep_text = st.builds(
        lambda n, open_, close: open_ * n + close * n,
        st.sampled_from([1000, 100_000]),
        st.sampled_from(["["]),
        st.sampled_from(["]"]),
    ) | st.builds(lambda n: '{"a":' * n + "0" + "}" * n, st.sampled_from([1000, 100_000]))
    return st.one_of(
        json_values().map(dumps),
        deep_text,
        st.sampled_from(["", "null", "[]", "{}", "1" * 5000, '"\\ud800"', "\ufeff{}", '{"a": 1,}', "NaN"]),
        st.text(max_size=50),
    )


BYTE_OPS = ("truncate", "flip", "size", "insert", "append", "empty", "overwrite")


def byte_edits() -> st.SearchStrategy[tuple[str, int, Any]]:
    """(op, position in thousandths of the file, payload)."""
    return st.tuples(
        st.sampled_from(BYTE_OPS),
        st.integers(0, 1000),
        st.one_of(st.binary(max_size=16), st.sampled_from(EDGE_INTS)),
    )


def apply_bytes(data: bytes, edit: tuple[str, int, Any]) -> bytes:
    """`data` with one byte-level edit applied."""
    op, where, payload = edit
    pos = min(len(data), len(data) * where // 1000)
    raw = payload if isinstance(payload, bytes) else struct.pack("<Q", payload % 2**64)
    if op == "truncate":
        return data[:pos]
    if op == "flip":
        if not data:
            return b"\xff"
        i = min(pos, len(data) - 1)
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    if op == "size":  # a little-endian u32 (MDS counts and offsets) claiming a hostile number
        n = (
            payload if isinstance(payload, int) else int.from_bytes(payload[:4] or b"\xff", "little")
        ) % 2**32
        pos -= pos % 4
        return data[:pos] + struct.pack("<I", n) + data[pos + 4 :]
    if op == "insert":
        return data[:pos] + raw + data[pos:]
    if op == "append":
        return data + raw
    if op == "empty":
        return b""
    return data[:pos] + raw + data[pos + len(raw) :]  # overwrite
