"""Fuzz (issue 39), entry point 1: a dataset's `index.json` and MDS shards, read by `StreamingDataset` (local,
and copied from a remote folder into a local cache) and `LocalDataset`.

Each input is a small valid dataset (plain or zstd, with or without digests) with one hostile edit: a value
anywhere in `index.json` replaced (wrong types, negative or huge numbers, deep JSON), a key dropped, a shard
name made hostile (`../x`, absolute, empty, a folder), the text truncated or its bytes flipped, or a shard file
truncated, overwritten or extended. Valid copies of the shards are planted where hostile names point, so a
reader that followed one would succeed; the guard reports opening them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import fuzz

ENTRY = "streaming index.json and MDS shards"
ALLOWED = (ValueError, FileNotFoundError)  # what train.py reports as one error line (foundry.cli.USER_ERRORS)
NAMES = ("index.json", "shard")
N = 24
DATASETS = ("plain", "zstd", "hashed")


def prepare(work: Path) -> dict[str, Path]:
    from streaming import MDSWriter

    out = {}
    for kind in DATASETS:
        path = work / kind
        with MDSWriter(
            out=str(path),
            columns={"x": "int", "s": "str", "b": "bytes"},
            size_limit=180,
            compression="zstd" if kind == "zstd" else None,
            hashes=["sha1", "xxh64"] if kind == "hashed" else None,
        ) as w:
            for i in range(N):
                w.write({"x": i, "s": f"sample {i}", "b": bytes([i]) * (i % 5)})
        out[kind] = path
    return out


def _edits() -> st.SearchStrategy[tuple[Any, ...]]:
    path = st.lists(st.integers(0, 50), min_size=1, max_size=6)
    return st.one_of(
        st.tuples(st.just("set"), path, hostile.json_values()),
        st.tuples(st.just("number"), st.integers(0, 200), hostile.integers()),
        st.tuples(st.just("name"), st.integers(0, 50), hostile.names()),
        st.tuples(st.just("drop"), path),
        st.tuples(st.just("text"), hostile.byte_edits()),
        st.tuples(st.just("replace"), hostile.json_documents()),
        st.tuples(st.just("shard"), st.integers(0, 20), hostile.byte_edits()),
    )


def cases() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "dataset": st.sampled_from(DATASETS),
            "edit": _edits(),
            "reader": st.sampled_from(["local", "remote", "iterate", "LocalDataset"]),
        }
    )


def EXAMPLES() -> list[dict[str, Any]]:  # noqa: N802 - the harness's name
    return [  # no edit: the samples read back as written (the loop reads real data)
        {"dataset": kind, "edit": ("drop", [99, 99, 99, 99, 99, 99, 99]), "reader": reader, "check": True}
        for kind in DATASETS
        for reader in ("local", "remote", "iterate", "LocalDataset")
    ]


def _ds(folder: Path) -> Path:
    return folder / "a" / "b" / "ds"


def write_roots(folder: Path) -> list[Path]:
    return [_ds(folder), folder / "a" / "b" / "local"]


def planted(folder: Path) -> list[Path]:
    return [p for p in (folder / "a").rglob("*") if p.is_file() and "evil" in p.name]


def _leaves(
    obj: Any, want: type, key: str | None = None, path: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:  # noqa: ANN401
    """Paths of leaves of type `want` (bool excluded for int), or of values under a key named `key`."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if key is not None and k == key and isinstance(v, str):
            out.append((*path, k))
        elif key is None and isinstance(v, want) and not isinstance(v, bool):
            out.append((*path, k))
        else:
            out += _leaves(v, want, key, (*path, k))
    return out


def _walk(obj: Any, picks: list[int]) -> tuple[Any, Any] | None:  # noqa: ANN401
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


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:  # noqa: ANN401
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def build(case: dict[str, Any], folder: Path, base: dict[str, Path]) -> dict[str, Any]:
    ds = _ds(folder)
    shutil.copytree(base[case["dataset"]], ds)
    index_file = ds / "index.json"
    text = index_file.read_text()
    index = json.loads(text)
    shard_files = sorted(p.name for p in ds.iterdir() if p.name != "index.json")
    # valid copies where hostile names point: one and two levels up, and an absolute folder
    for where in (ds.parent, ds.parent.parent, folder / "a" / "abs"):
        where.mkdir(parents=True, exist_ok=True)
        for name in shard_files:
            shutil.copyfile(ds / name, where / f"evil-{name}")
    kind, *args = case["edit"]
    if kind == "set":
        found = _walk(index, args[0])
        if found is not None:
            found[0][found[1]] = args[1]
        text = hostile.dumps(index)
    elif kind == "number":
        leaves = _leaves(index, int)
        if leaves:
            _set(index, leaves[args[0] % len(leaves)], args[1])
        text = hostile.dumps(index)
    elif kind == "name":
        leaves = _leaves(index, str, key="basename")
        name = (
            args[1].replace("{abs}", str(folder / "a" / "abs")).replace("{shard}", "evil-" + shard_files[0])
        )
        if leaves:
            _set(index, leaves[args[0] % len(leaves)], name)
        text = hostile.dumps(index)
    elif kind == "drop":
        found = _walk(index, args[0])
        if found is not None and len(args[0]) < 7:
            del found[0][found[1]]
        text = hostile.dumps(index)
    elif kind == "text":
        index_file.write_bytes(hostile.apply_bytes(text.encode(), args[0]))
        text = None
    elif kind == "replace":
        text = args[0]
    elif kind == "shard":
        target = ds / shard_files[args[0] % len(shard_files)]
        target.write_bytes(hostile.apply_bytes(target.read_bytes(), args[1]))
    if text is not None:
        index_file.write_text(text) if isinstance(text, str) else index_file.write_bytes(text)
    return {**case, "ds": ds}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from streaming import LocalDataset, StreamingDataset

    ds, reader = built["ds"], built["reader"]
    if reader == "LocalDataset":
        data: Any = LocalDataset(str(ds))
        samples = [data[i] for i in range(len(data))]
    elif reader == "iterate":
        data = StreamingDataset(local=str(ds), batch_size=4, shuffle=True, num_canonical_nodes=2)
        samples = list(data)
    else:
        remote = reader == "remote"
        local = ds.parent / "local" if remote else ds
        data = StreamingDataset(remote=str(ds) if remote else None, local=str(local), batch_size=4)
        samples = [data[i] for i in range(len(data))]
    for s in samples:
        assert isinstance(s, dict) and set(s) == {"x", "s", "b"}, s
    if built.get("check"):
        assert sorted(s["x"] for s in samples) == list(range(N))
        assert all(s["s"] == f"sample {s['x']}" for s in samples)


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
