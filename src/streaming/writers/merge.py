"""``merge_index``: join the indexes of datasets written in parallel into one ``index.json``.

Parallel conversion writes one sub-directory dataset per worker under a common root; merging rewrites each
shard's file basenames with the sub-directory prefix (``"3/shard.00000.mds"``) and concatenates the shard
lists in partition order, so the root reads as one dataset without moving any shard. Both call forms of the
reference are supported; partitions found by listing are taken in sorted order, so the result is
deterministic. Partition folder names (from a listing or from the given paths) and the basenames inside each
partition index are untrusted: each must be a safe relative name (``streaming.util.safepath``), checked before
the merged index is written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from streaming.format.index import INDEX_FILENAME, DatasetIndex, ShardInfo, load_index, write_index
from streaming.storage import RetryPolicy, download_file, list_files, upload_file
from streaming.storage.url import is_remote, join_url
from streaming.util.safepath import safe_relpath
from streaming.writers.output import split_out

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


def _remote_partitions(root: str) -> list[str]:
    rel = [u[len(root.rstrip("/")) + 1 :] for u in list_files(root.rstrip("/") + "/")]
    found = sorted(
        (p[: -len(INDEX_FILENAME) - 1] for p in rel if p.endswith("/" + INDEX_FILENAME)),
        key=lambda p: [int(t) if t.isdigit() else t for t in p.split("/")],
    )
    if not found:
        raise FileNotFoundError(f"merge_index: no partition {INDEX_FILENAME} found under {root}")
    return found


def merge_index(*args: object, keep_local: bool = True, download_timeout: float = 60) -> None:
    """Merge partition indexes into ``out/index.json`` (local paths or any storage URL).

    Call forms:
        ``merge_index(index_file_urls, out)``: each listed ``.../<part>/index.json`` contributes its shards,
        with basenames prefixed by ``<part>`` (the directory holding that index), in the given order.
        ``merge_index(out)``: every ``index.json`` below ``out`` (other than ``out/index.json``) is a
        partition, taken in natural sorted order of its sub-directory (``2`` before ``10``).
        ``out`` may be a path, a URL, or ``(local_dir, remote_url)``.

    Args:
        keep_local: With a remote ``out``, keep the merged index in its local directory.
        download_timeout: Seconds allowed for each index download.
    """
    policy = RetryPolicy(timeout=download_timeout)
    if len(args) == 1:
        out_local, out_remote = split_out(args[0])  # type: ignore[arg-type]
        root = out_remote or out_local
        assert root is not None
        if out_remote is not None:
            prefixes = _remote_partitions(out_remote)
        else:
            prefixes = [p.replace(os.sep, "/") for p in _partition_dirs(root)]
        parts = [join_url(root, p, INDEX_FILENAME) for p in prefixes]
    elif len(args) == 2:
        urls, out_arg = args
        if not isinstance(urls, Sequence) or isinstance(urls, str):
            raise TypeError(
                "merge_index(index_file_urls, out): index_file_urls must be a list of index.json paths"
            )
        out_local, out_remote = split_out(out_arg)  # type: ignore[arg-type]
        parts = []
        for u in urls:
            local, remote = split_out(u)
            parts.append(str(remote or local))
        prefixes = [
            p.rstrip("/").rsplit("/", 2)[-2] if p.endswith(INDEX_FILENAME) else p.rstrip("/").rsplit("/")[-1]
            for p in parts
        ]
    else:
        raise TypeError("merge_index takes (index_file_urls, out) or (out)")
    # Check every partition folder name before reading or writing anything.
    prefixes = [safe_relpath(p, source=path, field="partition folder") for path, p in zip(parts, prefixes)]
    with tempfile.TemporaryDirectory(prefix="merge-index-") as scratch:
        shards: list[ShardInfo] = []
        seen: set[str] = set()
        for number, (path, prefix) in enumerate(zip(parts, prefixes)):
            if not path.endswith(INDEX_FILENAME):
                path = join_url(path, INDEX_FILENAME)
            if is_remote(path):
                local_dir = os.path.join(scratch, str(number))
                download_file(path, os.path.join(local_dir, INDEX_FILENAME), policy=policy)
            elif not os.path.exists(path):
                raise FileNotFoundError(f"merge_index: partition index {path} does not exist")
            else:
                local_dir = os.path.dirname(path)
            for shard in load_index(local_dir, source=path).shards:
                merged = shard.with_prefix(prefix, source=path)
                if merged.raw_data.basename not in seen:
                    seen.add(merged.raw_data.basename)
                    shards.append(merged)
        target_dir = out_local or os.path.join(scratch, "out")
        os.makedirs(target_dir, exist_ok=True)
        target = os.path.join(target_dir, INDEX_FILENAME)
        write_index(DatasetIndex(path=target, shards=shards), target)
        if out_remote is not None:
            upload_file(target, join_url(out_remote, INDEX_FILENAME), policy=policy)
            if out_local is not None and not keep_local:
                os.remove(target)
