"""Finetuning rows held in memory: local or object-store files, saved HF datasets, HF datasets by name.

Design note: instruction datasets are small (thousands to a few hundred thousand rows), so non-MDS sources
are read whole into a list of dicts, then validated and tokenized once (see `loader.py`); MDS is the path
for anything larger. Plain files (`.jsonl`, `.json`, `.csv`, `.parquet`) are read directly through
`streaming.storage.open_url` (local paths or any store URL, no HF cache); `hf_kwargs` routes them through
`datasets.load_dataset` instead. A folder saved with `Dataset(Dict).save_to_disk` is loaded from disk, and any
other name goes to `datasets.load_dataset(name, split=..., **hf_kwargs)` (offline: from the local HF cache).
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from streaming.storage import is_remote, list_files, open_url, redact

__all__ = ["FILE_SUFFIXES", "load_rows", "split_files"]

FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def _suffix(url: str) -> str:
    return os.path.splitext(url.split("?", 1)[0].rstrip("/"))[1]


def _stem(url: str) -> str:
    return os.path.splitext(url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])[0]


def _children(folder: str) -> list[str]:
    if is_remote(folder):
        prefix = folder.rstrip("/") + "/"
        return [u for u in list_files(prefix) if "/" not in u[len(prefix) :]]
    path = Path(folder)
    return [str(p) for p in path.iterdir() if p.is_file()] if path.is_dir() else []


def split_files(dataset: str, split: str) -> list[str] | None:
    """The data files of `split`: `dataset` itself if it is one, else `<dataset>/<split>/*`, else
    `<dataset>/<split>.<ext>`; None when `dataset` is no file or folder of such files (e.g. a hub name)."""
    if _suffix(dataset) in FILE_SUFFIXES and (is_remote(dataset) or Path(dataset).is_file()):
        return [dataset]
    if not is_remote(dataset) and (not Path(dataset).is_dir() or _saved_hf_dataset(Path(dataset))):
        return None
    root = dataset.rstrip("/")
    in_folder = sorted(u for u in _children(f"{root}/{split}") if _suffix(u) in FILE_SUFFIXES)
    if in_folder:
        return in_folder
    named = sorted(u for u in _children(root) if _suffix(u) in FILE_SUFFIXES and _stem(u) == split)
    if named:
        return named
    found = sorted({_stem(u) for u in _children(root) if _suffix(u) in FILE_SUFFIXES})
    raise FileNotFoundError(
        f"no data files for split {split!r} under {redact(dataset)}: expected {split}.jsonl (or .json/.csv/"
        f".parquet) or a {split}/ folder of them; found splits {found or 'none'}"
    )


def _saved_hf_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def _read_file(url: str) -> list[dict[str, Any]]:
    suffix = _suffix(url)
    if suffix == ".parquet":
        # optional (comes with `datasets`); only parquet sources need it
        import pyarrow.parquet as pq

        with open_url(url, "rb") as f:
            return pq.read_table(io.BytesIO(f.read())).to_pylist()
    with open_url(url, "r") as f:
        text = f.read()
    if suffix == ".csv":
        return [dict(r) for r in csv.DictReader(io.StringIO(text))]
    stripped = text.lstrip()
    if suffix == ".json" and stripped.startswith("["):
        return list(json.loads(text))
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{redact(url)} line {n} is not valid JSON: {err}") from err
    return rows


def _load_hf(
    name: str, split: str, hf_kwargs: dict[str, Any], files: list[str] | None
) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as err:
        # optional dependency
        raise ImportError(
            "HF dataset sources need the `datasets` package: pip install 'foundry-stack[hf]'"
        ) from err
    if files is not None:
        kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}[_suffix(files[0])]
        ds = datasets.load_dataset(kind, data_files=files, split="train", **hf_kwargs)
    elif Path(name).is_dir() and _saved_hf_dataset(Path(name)):
        loaded = datasets.load_from_disk(name)
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"data.hf_name={name!r} has splits {sorted(loaded)}, not {split!r}")
            loaded = loaded[split]
        ds = loaded
    else:
        try:
            ds = datasets.load_dataset(name, split=split, **hf_kwargs)
        except (FileNotFoundError, ConnectionError, ValueError) as err:
            raise ValueError(
                f"could not load HF dataset {name!r} split {split!r} ({err}); offline, point data.hf_name at "
                "local files or a folder saved with save_to_disk"
            ) from err
    return [dict(r) for r in ds]


def load_rows(name: str, *, split: str, hf_kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """All rows of `split` from a file, a folder of `{split}.*` files, a saved HF dataset, or a hub name."""
    files = split_files(name, split)
    if files is not None and not hf_kwargs:
        return [row for url in files for row in _read_file(url)]
    return _load_hf(name, split, dict(hf_kwargs or {}), files)
