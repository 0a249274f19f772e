"""``python -m streaming``: inspect, validate and repair datasets from the shell.

Exit codes: 0 success, 1 a dataset problem (named on stderr), 2 bad usage.

Every URL's store is chosen by its prefix (`STREAMING_STORAGE_PROFILES`, or `--storage-profiles FILE` before
the command: the same file `train.py storage=...` uses), so one command can read several stores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from streaming.format.index import INDEX_FILENAME, load_index
from streaming.storage import download_file, list_files, upload_file
from streaming.storage.url import is_remote, join_url
from streaming.tools.check import describe_dataset, is_shard_file, rebuild_index, validate_dataset
from streaming.tools.storage_option import add_storage_option, apply_storage_option
from streaming.util.safepath import safe_join
from streaming.util.sizes import format_bytes


@contextmanager
def _local_copy(path: str, split: str | None, *, shards: bool) -> Iterator[str]:
    """A local directory holding the dataset at ``path`` (downloaded to a temp dir when ``path`` is a URL).

    Shard names come from the downloaded ``index.json``, which ``load_index`` checks before any shard is
    fetched; each destination is also verified to stay inside the temp dir.
    """
    if not is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="streaming-cli-") as scratch:
        remote = join_url(path, split)
        local = os.path.join(scratch, split) if split else scratch
        download_file(join_url(remote, INDEX_FILENAME), os.path.join(local, INDEX_FILENAME))
        if shards:
            index = load_index(local, source=join_url(remote, INDEX_FILENAME))
            for number, shard in enumerate(index.shards):
                for info in shard.stored_files():
                    dest = safe_join(local, info.basename, source=index.path, field=f"shards[{number}] file")
                    download_file(join_url(remote, info.basename), dest, root=local)
        yield scratch


__all__ = ["main"]


def _inspect(args: argparse.Namespace) -> int:
    with _local_copy(args.dir, args.split, shards=False) as local:
        info = describe_dataset(local, args.split)
    info["path"] = join_url(args.dir, args.split, INDEX_FILENAME)
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"dataset      {info['path']}")
    print(f"format       {', '.join(info['formats']) or '-'}")
    print(f"shards       {info['shards']:,}")
    print(
        f"samples      {info['samples']:,}  (per shard {info['samples_per_shard']['min']:,}"
        f"..{info['samples_per_shard']['max']:,})"
    )
    print(f"compression  {', '.join(info['compression'])}")
    print(f"hashes       {', '.join(info['hashes']) or '-'}")
    ratio = info["raw_bytes"] / info["stored_bytes"] if info["stored_bytes"] else 0.0
    print(
        f"bytes        raw {format_bytes(info['raw_bytes'])}, stored {format_bytes(info['stored_bytes'])}"
        f" (ratio {ratio:.2f})"
    )
    for i, columns in enumerate(info["columns"]):
        title = "columns" if len(info["columns"]) == 1 else f"columns #{i}"
        print(title)
        width = max(len(n) for n in columns)
        for name, enc in columns.items():
            print(f"  {name:<{width}}  {enc}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    with _local_copy(args.dir, args.split, shards=True) as local:
        problems = validate_dataset(local, args.split, decode=args.decode)
        info = describe_dataset(local, args.split)
    if problems:
        for p in problems:
            print(f"INVALID {p}", file=sys.stderr)
        print(f"{len(problems)} problem(s) in {args.dir}", file=sys.stderr)
        return 1
    print(f"OK {args.dir}: {info['shards']} shards, {info['samples']} samples verified")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    if not is_remote(args.dir):
        index = rebuild_index(args.dir, overwrite=args.force)
        print(f"wrote {index.path}: {len(index.shards)} shards, {index.num_samples} samples")
        return 0
    prefix = args.dir.rstrip("/") + "/"
    with tempfile.TemporaryDirectory(prefix="streaming-cli-") as scratch:
        for url in list_files(prefix):
            name = url[len(prefix) :]
            if name == INDEX_FILENAME and not args.force:
                raise FileExistsError(f"{url} exists; pass --force to replace it")
            if is_shard_file(name):  # only plain shard names: never a nested, absolute or '..' name
                dest = safe_join(scratch, name, source=f"listing of {prefix}", field="object name")
                download_file(url, dest, root=scratch)
        index = rebuild_index(scratch, overwrite=True)
        upload_file(index.path, prefix + INDEX_FILENAME)
    print(f"wrote {prefix}{INDEX_FILENAME}: {len(index.shards)} shards, {index.num_samples} samples")
    return 0


def _ls(args: argparse.Namespace) -> int:
    """Every file under each folder or URL prefix, with its store's settings chosen by URL prefix."""
    for folder in args.dirs:
        if is_remote(folder):
            urls = list_files(folder.rstrip("/") + "/")
        else:
            urls = sorted(str(p) for p in _walk(folder))
        for url in urls:
            print(url)
        if not urls:
            print(f"{folder}: no files", file=sys.stderr)
    return 0


def _walk(folder: str) -> Iterator[str]:
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder}: no such folder")
    for root, _dirs, files in os.walk(folder):
        for name in files:
            yield os.path.join(root, name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streaming", description=__doc__.splitlines()[0])
    add_storage_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ls", help="the files under one or more folders or URL prefixes (any mix of stores)")
    p.add_argument("dirs", nargs="+", help="folders or URLs (s3://, gs://, azure://, ...)")
    p.set_defaults(func=_ls)
    p = sub.add_parser("inspect", help="shards, samples, columns, encodings, bytes raw/compressed")
    p.add_argument("dir", help="dataset directory or URL (s3://, gs://, azure://, hf://, https://)")
    p.add_argument("--split", default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_inspect)
    p = sub.add_parser(
        "validate", help="check every hash, offset table and sample count; exit 1 on a problem"
    )
    p.add_argument("dir", help="dataset directory or URL (s3://, gs://, azure://, hf://, https://)")
    p.add_argument("--split", default=None)
    p.add_argument("--decode", action="store_true", help="also decode every sample")
    p.set_defaults(func=_validate)
    p = sub.add_parser("rebuild-index", help="recreate index.json from the shards' embedded configs")
    p.add_argument("dir", help="dataset directory or URL (s3://, gs://, azure://, hf://, https://)")
    p.add_argument("--force", action="store_true", help="overwrite an existing index.json")
    p.set_defaults(func=_rebuild)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        apply_storage_option(args.storage_profiles)
        return args.func(args)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
