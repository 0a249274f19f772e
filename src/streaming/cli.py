"""``python -m streaming``: inspect, validate and repair datasets from the shell.

Exit codes: 0 success, 1 a dataset problem (named on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from streaming.check import describe_dataset, rebuild_index, validate_dataset
from streaming.sizes import format_bytes

__all__ = ["main"]


def _inspect(args: argparse.Namespace) -> int:
    info = describe_dataset(args.dir, args.split)
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
    problems = validate_dataset(args.dir, args.split, decode=args.decode)
    if problems:
        for p in problems:
            print(f"INVALID {p}", file=sys.stderr)
        print(f"{len(problems)} problem(s) in {args.dir}", file=sys.stderr)
        return 1
    info = describe_dataset(args.dir, args.split)
    print(f"OK {args.dir}: {info['shards']} shards, {info['samples']} samples verified")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    index = rebuild_index(args.dir, overwrite=args.force)
    print(f"wrote {index.path}: {len(index.shards)} shards, {index.num_samples} samples")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streaming", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="shards, samples, columns, encodings, bytes raw/compressed")
    p.add_argument("dir")
    p.add_argument("--split", default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_inspect)
    p = sub.add_parser(
        "validate", help="check every hash, offset table and sample count; exit 1 on a problem"
    )
    p.add_argument("dir")
    p.add_argument("--split", default=None)
    p.add_argument("--decode", action="store_true", help="also decode every sample")
    p.set_defaults(func=_validate)
    p = sub.add_parser("rebuild-index", help="recreate index.json from the shards' embedded configs")
    p.add_argument("dir")
    p.add_argument("--force", action="store_true", help="overwrite an existing index.json")
    p.set_defaults(func=_rebuild)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
