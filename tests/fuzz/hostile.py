"""Hostile values for the fuzz suite (issue 39): the building blocks every entry point's strategy draws from.

Numbers at the edges of every integer width, strings that are paths out of a folder, control characters or
interpolations, JSON nested past the recursion limit, and byte-level edits of a file (truncate, flip,
overwrite with a little-endian size, insert, append).
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import tarfile
import zipfile
from collections import OrderedDict
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


def dumps(value: Any) -> str:
    """`json.dumps` of a value that may hold `Deep` parts."""
    deep: dict[str, Deep] = {}

    def token(obj: Any) -> str:
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
    """(op, position in 2**20ths of the file (any byte of a file up to 1 MiB), payload)."""
    return st.tuples(
        st.sampled_from(BYTE_OPS),
        st.integers(0, 1 << 20),
        st.one_of(st.binary(max_size=16), st.sampled_from(EDGE_INTS)),
    )


def apply_bytes(data: bytes, edit: tuple[str, int, Any]) -> bytes:
    """`data` with one byte-level edit applied."""
    op, where, payload = edit
    pos = min(len(data), len(data) * where >> 20)
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


# ------------------------------------------------------------------------------------------- JSON file edits


def json_edits() -> st.SearchStrategy[tuple[Any, ...]]:
    """One hostile edit of a JSON file (see `apply_json_edit`)."""
    path = st.lists(st.integers(0, 50), min_size=1, max_size=6)
    return st.one_of(
        st.tuples(st.just("set"), path, json_values()),
        st.tuples(st.just("number"), st.integers(0, 200), integers()),
        st.tuples(st.just("name"), st.integers(0, 50), names()),
        st.tuples(st.just("key"), st.integers(0, 200), names()),
        st.tuples(st.just("drop"), path),
        st.tuples(st.just("text"), byte_edits()),
        st.tuples(st.just("replace"), json_documents()),
    )


def _leaves(
    obj: Any, want: type | None, key: str | None = None, path: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Paths of leaves of type `want` (bool excluded for int), or of strings under a key named `key`, or (both
    None) of every dict key."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if want is None and key is None and isinstance(obj, dict):
            out.append((*path, k))
        if key is not None and k == key and isinstance(v, str):
            out.append((*path, k))
        elif want is not None and isinstance(v, want) and not isinstance(v, bool):
            out.append((*path, k))
        else:
            out += _leaves(v, want, key, (*path, k))
    return out


def _walk(obj: Any, picks: list[int]) -> tuple[Any, Any] | None:
    """The (container, key) that `picks` lead to (each pick taken modulo the container's size)."""
    parent, key = None, None
    for p in picks:
        node = obj if parent is None else parent[key]
        if isinstance(node, dict) and node:
            parent, key = node, sorted(node)[p % len(node)]
        elif isinstance(node, list) and node:
            parent, key = node, p % len(node)
        else:
            break
    return None if parent is None else (parent, key)


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        obj = obj[k]
    return obj


def edit_value(obj: Any, edit: tuple[Any, ...], *, name_key: str = "basename", fill: Any = None) -> Any:
    """`obj` (decoded JSON, changed in place where it can be) after a structural `edit` from `json_edits`
    (`text` and `replace` edits: the replacement value itself); `fill(name)` fills a hostile name's
    placeholders (`{abs}`, `{shard}`)."""
    kind, *args = edit
    if kind == "set":
        found = _walk(obj, args[0])
        if found is not None:
            found[0][found[1]] = args[1]
    elif kind == "number":
        leaves = _leaves(obj, int)
        if leaves:
            path = leaves[args[0] % len(leaves)]
            _at(obj, path)[path[-1]] = args[1]
    elif kind in ("name", "key"):
        name = fill(args[1]) if fill else args[1]
        leaves = _leaves(obj, None, name_key if kind == "name" else None)
        if leaves:
            path = leaves[args[0] % len(leaves)]
            parent = _at(obj, path)
            if kind == "name":
                parent[path[-1]] = name
            else:
                parent[name] = parent.pop(path[-1])
    elif kind == "drop":
        found = _walk(obj, args[0])
        if found is not None and len(args[0]) < 7:  # seven picks: the no-op edit
            del found[0][found[1]]
    elif kind == "text":
        return args[0]
    elif kind == "replace":
        return args[0]
    return obj


def apply_json_edit(
    text: str, edit: tuple[Any, ...], *, name_key: str = "basename", fill: Any = None
) -> bytes:
    """The bytes of JSON `text` after `edit` (from `json_edits`), see `edit_value`."""
    kind = edit[0]
    if kind == "text":
        return apply_bytes(text.encode(), edit[1])
    if kind == "replace":
        return edit[1].encode("utf-8", "surrogatepass")
    return dumps(edit_value(json.loads(text), edit, name_key=name_key, fill=fill)).encode(
        "utf-8", "surrogatepass"
    )


def materialize(value: Any) -> Any:
    """`value` with its `Deep` parts built as the nested Python objects they stand for (without recursion)."""
    if isinstance(value, Deep):
        out: Any = 0
        for _ in range(value.depth):
            out = [out] if value.kind == "list" else {"a": out}
        return out
    if isinstance(value, list):
        return [materialize(v) for v in value]
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    return value


def replace_under(obj: Any, key: str, new: Any) -> Any:
    """`obj` with the first value under `key` (depth first) replaced by `new`."""
    done = False

    def walk(node: Any) -> Any:
        nonlocal done
        if isinstance(node, dict):
            out = type(node)() if isinstance(node, OrderedDict) else {}
            for k, v in node.items():
                if not done and k == key:
                    out[k], done = new, True
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(obj)


NO_EDIT = ("drop", [99] * 7)
"""An edit that changes nothing (the loop's first inputs read real, valid files)."""


# ------------------------------------------------------------------------------------------ code in a pickle


class _RunsCode:
    """Pickles as a call of `os.system` (what a crafted checkpoint does to whoever unpickles it)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (self.command,))


def code_pickle_zip(command: str = "touch PWNED", *, tensors: bool = True) -> bytes:
    """A `torch.save` zip whose pickle calls `os.system(command)` when loaded (next to a real tensor)."""
    import io

    import torch

    buf = io.BytesIO()
    obj: dict[str, Any] = {
        "state": {"model": {"w": torch.ones(2)} if tensors else {}},
        "x": _RunsCode(command),
    }
    torch.save(obj, buf)
    return buf.getvalue()


# ---------------------------------------------------------------------------------- lying torch and tar files


class _Ref:
    def __init__(self, kind: Any, key: str, numel: int) -> None:
        self.kind, self.key, self.numel = kind, key, numel


class _TensorPickle(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Ref):
            return ("storage", obj.kind, obj.key, "cpu", obj.numel)
        return None


class _Rebuild:
    def __init__(self, *args: Any) -> None:
        self.args = args

    def __reduce__(self) -> tuple[Any, ...]:
        import torch._utils

        return (torch._utils._rebuild_tensor_v2, self.args)


def tensor_zip(offset: int, size: list[int], stride: list[int], numel: int, kind: str, record: int) -> bytes:
    """A torch zip holding one tensor whose storage record (`record` zero bytes, claimed `numel` elements of
    `torch.<kind>`), offset, size and stride are all as given: the ways a crafted file can lie about a tensor."""
    import torch

    ref = _Ref(getattr(torch, kind), "0", numel)
    obj = {
        "state": {
            "model": {
                "model.transformer.wte.weight": _Rebuild(ref, offset, size, stride, False, OrderedDict())
            }
        }
    }
    buf = io.BytesIO()
    _TensorPickle(buf, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", bytes(record))
    return out.getvalue()


def composer_tar(pt: bytes, name: str, how: str) -> bytes:
    """A Composer `.tar` holding `pt` as member `name`: `plain`, `truncated` (half its data), `huge` (its header
    declares 64 GiB), or that member a `link` to /etc/passwd or a `dir`."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(name or "composer_states.pt")
        if how == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        elif how == "dir":
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(pt)
            tar.addfile(info, io.BytesIO(pt))
    blob = out.getvalue()
    if how == "truncated":
        return blob[: 512 + len(pt) // 2]
    if how == "huge":  # the header declares 64 GiB; the data is the real file's
        header = bytearray(blob[:512])
        header[124:136] = b"%011o\x00" % (64 << 30)
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\x00 " % sum(header)
        return bytes(header) + blob[512:]
    return blob
