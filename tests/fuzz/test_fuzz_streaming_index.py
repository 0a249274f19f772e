"""Fuzz (issue 39), entry point 1: a dataset's `index.json` and MDS shards, read by `StreamingDataset` (local,
and copied from a remote folder into a local cache) and `LocalDataset`.

Each input is a small valid dataset (plain or zstd, with or without digests) with one hostile edit: a value
anywhere in `index.json` replaced (wrong types, negative or huge numbers, deep JSON), a key dropped, a shard
name made hostile (`../x`, absolute, empty, a folder), the text truncated or its bytes flipped, or a shard file
truncated, overwritten or extended. Valid copies of the shards are planted where hostile names point, so a
reader that followed one would succeed; the guard reports opening them.
"""

from __future__ import annotations

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
SHORT_EXAMPLES = 25
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
    return hostile.json_edits() | st.tuples(st.just("shard"), st.integers(0, 20), hostile.byte_edits())


def cases() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "dataset": st.sampled_from(DATASETS),
            "edit": _edits(),
            "reader": st.sampled_from(["local", "remote", "iterate", "LocalDataset"]),
        }
    )


def EXAMPLES() -> list[dict[str, Any]]:
    return [  # no edit: the samples read back as written (the loop reads real data)
        {"dataset": kind, "edit": hostile.NO_EDIT, "reader": reader, "check": True}
        for kind, reader in zip(DATASETS * 2, ("local", "remote", "iterate", "LocalDataset"))
    ]


def _ds(folder: Path) -> Path:
    return folder / "a" / "b" / "ds"


def write_roots(folder: Path) -> list[Path]:
    """The dataset and cache folders, and their lock folders (hidden siblings, `streaming.cache.locks.lock_dir`)."""
    b = folder / "a" / "b"
    return [_ds(folder), b / "local", b / ".ds.locks", b / ".local.locks"]


def planted(folder: Path) -> list[Path]:
    return [p for p in (folder / "a").rglob("*") if p.is_file() and "evil" in p.name]


def build(case: dict[str, Any], folder: Path, base: dict[str, Path]) -> dict[str, Any]:
    ds = _ds(folder)
    shutil.copytree(base[case["dataset"]], ds)
    index_file = ds / "index.json"
    text = index_file.read_text()
    shard_files = sorted(p.name for p in ds.iterdir() if p.name != "index.json")
    # valid copies where hostile names point: one and two levels up, and an absolute folder
    for where in (ds.parent, ds.parent.parent, folder / "a" / "abs"):
        where.mkdir(parents=True, exist_ok=True)
        for name in shard_files:
            shutil.copyfile(ds / name, where / f"evil-{name}")
    edit = case["edit"]
    if edit[0] == "shard":
        target = ds / shard_files[edit[1] % len(shard_files)]
        target.write_bytes(hostile.apply_bytes(target.read_bytes(), edit[2]))
    else:

        def fill(name: str) -> str:
            return name.replace("{abs}", str(folder / "a" / "abs")).replace(
                "{shard}", "evil-" + shard_files[0]
            )

        index_file.write_bytes(hostile.apply_json_edit(text, edit, fill=fill))
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
