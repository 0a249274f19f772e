"""``merge_index``: join the indexes of datasets written in parallel into one ``index.json``.

Parallel conversion writes one sub-directory dataset per worker under a common root; merging rewrites each
shard's file basenames with the sub-directory prefix (``"3/shard.00000.mds"``) and concatenates the shard
lists in partition order, so the root reads as one dataset without moving any shard. Both call forms of the
reference are supported; partitions found by listing are taken in sorted order, so the result is
deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from streaming.format.index import INDEX_FILENAME, DatasetIndex, ShardInfo, load_index, write_index
from streaming.output import split_out

__all__ = ["merge_index"]


def _partition_dirs(root: str) -> list[str]:
    found = []
    for dirpath, _dirnames, filenames in os.walk(root):
        if INDEX_FILENAME in filenames and os.path.abspath(dirpath) != os.path.abspath(root):
            found.append(os.path.relpath(dirpath, root))
    if not found:
        raise FileNotFoundError(f"merge_index: no partition {INDEX_FILENAME} found under {root}")
    return sorted(
        found, key=lambda p: [int(t) if t.isdigit() else t for t in p.replace(os.sep, "/").split("/")]
    )


def _local_path(entry: str | tuple[str, str]) -> str:
    local, remote = split_out(entry)  # type: ignore[arg-type]
    if local is None:
        raise ValueError(f"merge_index: remote index {remote!r} needs the storage layer; give local paths")
    return local


def merge_index(*args: object, keep_local: bool = True, download_timeout: float = 60) -> None:
    """Merge partition indexes into ``out/index.json``.

    Call forms:
        ``merge_index(index_file_urls, out)``: each listed ``.../<part>/index.json`` contributes its shards,
        with basenames prefixed by ``<part>`` (the directory holding that index), in the given order.
        ``merge_index(out)``: every ``index.json`` below ``out`` (other than ``out/index.json``) is a
        partition, taken in sorted order of its sub-directory.

    Args:
        keep_local: Kept for API compatibility (local merges keep their files).
        download_timeout: Kept for API compatibility (used for remote partitions).
    """
    del keep_local, download_timeout
    if len(args) == 1:
        out = _local_path(args[0])  # type: ignore[arg-type]
        parts = [os.path.join(out, p, INDEX_FILENAME) for p in _partition_dirs(out)]
        prefixes = [os.path.relpath(os.path.dirname(p), out).replace(os.sep, "/") for p in parts]
    elif len(args) == 2:
        urls, out_arg = args
        if not isinstance(urls, Sequence) or isinstance(urls, str):
            raise TypeError(
                "merge_index(index_file_urls, out): index_file_urls must be a list of index.json paths"
            )
        out = _local_path(out_arg)  # type: ignore[arg-type]
        parts = [_local_path(u) for u in urls]  # type: ignore[arg-type]
        prefixes = [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in parts]
    else:
        raise TypeError("merge_index takes (index_file_urls, out) or (out)")
    shards: list[ShardInfo] = []
    seen: set[str] = set()
    for path, prefix in zip(parts, prefixes):
        if os.path.isdir(path):
            path = os.path.join(path, INDEX_FILENAME)
        if not os.path.exists(path):
            raise FileNotFoundError(f"merge_index: partition index {path} does not exist")
        for shard in load_index(os.path.dirname(path)).shards:
            merged = shard.with_prefix(prefix)
            if merged.raw_data.basename not in seen:
                seen.add(merged.raw_data.basename)
                shards.append(merged)
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, INDEX_FILENAME)
    write_index(DatasetIndex(path=target, shards=shards), target)
