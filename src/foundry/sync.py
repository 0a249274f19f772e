"""Copy a checkpoint folder or a dataset between stores: ``python -m foundry.sync <src-url> <dst-url>``.

Design note: the copy goes through ``streaming.storage`` (its retries, its per-prefix store profiles from
``STREAMING_STORAGE_PROFILES``), so source and destination may sit on different clouds in one command.
Digests come from what the tree already records: a checkpoint's ``manifest.json`` (sha256 per file) and an MDS
``index.json`` (each shard's ``hashes``, when the writer kept any); other files are compared by a sha256
computed on both sides. A source file that disagrees with its record stops the copy (the source is corrupt).
It is resumable: a destination file whose digest already matches is skipped, one that differs (a torn or
corrupted copy) is replaced. Manifests and indexes are copied last, so an interrupted sync never leaves a
destination checkpoint that looks complete while files are missing, the same rule the checkpoint saver
follows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from foundry.errors import require_path, run_tool
from streaming.format.hashing import hash_file, supported_hashes
from streaming.storage import download_file, join_url, list_files, redact, upload_file

__all__ = ["CorruptFileError", "Expected", "SyncReport", "expected_digests", "main", "sync"]

MANIFEST, INDEX = "manifest.json", "index.json"


class CorruptFileError(ValueError):
    """A file's bytes do not match the digest its manifest or index records."""


@dataclass(frozen=True)
class Expected:
    """What a manifest or index records about one file: its size and one digest."""

    size: int
    algo: str
    digest: str


@dataclass
class SyncReport:
    copied: int = 0
    skipped: int = 0
    replaced: int = 0
    bytes_copied: int = 0


def _parent(name: str) -> str:
    return name.rsplit("/", 1)[0] + "/" if "/" in name else ""


def expected_digests(name: str, text: str) -> dict[str, Expected]:
    """``{relative name: Expected}`` from the manifest or index at relative path ``name`` (other files: {}).

    Raises:
        ValueError: The manifest or index is not JSON, naming it.
    """
    base = name.rsplit("/", 1)[-1]
    if base not in (MANIFEST, INDEX):
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not JSON ({err})") from None
    out: dict[str, Expected] = {}
    if base == MANIFEST and isinstance(data.get("files"), dict):
        for rel, meta in data["files"].items():
            if isinstance(meta, dict) and "sha256" in meta:
                out[_parent(name) + rel] = Expected(int(meta.get("bytes", -1)), "sha256", str(meta["sha256"]))
    for shard in data.get("shards", []) if base == INDEX else []:
        for entry in shard.values() if isinstance(shard, dict) else []:
            if isinstance(entry, dict) and "basename" in entry:
                hashes = {a: h for a, h in entry.get("hashes", {}).items() if a in supported_hashes()}
                algo = "sha256" if "sha256" in hashes else next(iter(sorted(hashes)), None)
                if algo:
                    out[_parent(name) + entry["basename"]] = Expected(int(entry["bytes"]), algo, hashes[algo])
    return out


def _names(url: str) -> list[str]:
    """Relative names of the files under ``url`` (a folder or prefix)."""
    root = url.rstrip("/") + "/"
    return sorted(u[len(root) :] for u in list_files(root) if u.startswith(root))


def _order(names: list[str]) -> list[str]:
    """Data first, manifests and indexes last (deepest first), so a partial copy never looks complete."""
    meta = [n for n in names if n.rsplit("/", 1)[-1] in (MANIFEST, INDEX)]
    meta.sort(key=lambda n: (-n.count("/"), n))
    return [n for n in names if n not in set(meta)] + meta


def _digest(path: str, want: Expected | None) -> str:
    return hash_file(want.algo if want else "sha256", path)


def _copy_one(src: str, dst: str, name: str, want: Expected | None, present: bool, scratch: str) -> str:
    """``"skipped"``, ``"copied"`` or ``"replaced"``; raises CorruptFileError for a corrupt source."""
    here, there = os.path.join(scratch, "src"), os.path.join(scratch, "dst")
    src_url, dst_url = join_url(src, name), join_url(dst, name)
    have = None
    if present:
        download_file(dst_url, there)
        have = (os.path.getsize(there), _digest(there, want))
        if want and have == (want.size, want.digest):
            return "skipped"
    download_file(src_url, here)
    got = (os.path.getsize(here), _digest(here, want))
    if want and got != (want.size, want.digest):
        raise CorruptFileError(
            f"{redact(src_url)}: {got[0]} bytes, {want.algo} {got[1][:16]}..., but its manifest/index "
            f"records {want.size} bytes, {want.digest[:16]}...; the source is corrupt, so the copy stopped "
            "before it (files copied so far stay, and a rerun skips them)"
        )
    if have == got:
        return "skipped"
    upload_file(here, dst_url)
    download_file(dst_url, there)
    if (os.path.getsize(there), _digest(there, want)) != got:
        raise CorruptFileError(
            f"{redact(dst_url)}: the uploaded copy reads back different bytes; rerun the sync"
        )
    return "replaced" if present else "copied"


def sync(src: str, dst: str, *, progress: bool = True) -> SyncReport:
    """Copy every file under ``src`` to the same relative name under ``dst``, verifying digests.

    Raises:
        FileNotFoundError: ``src`` holds no files.
        CorruptFileError: A source file disagrees with its manifest/index, or an upload reads back different.
    """
    names = _names(src)
    if not names:
        raise FileNotFoundError(
            f"{redact(src)}: no files there to copy (check the URL and its store profile)"
        )
    present = set(_names(dst))
    report = SyncReport()
    expected: dict[str, Expected] = {}
    with tempfile.TemporaryDirectory(prefix="foundry-sync-") as scratch:
        for name in names:
            if name.rsplit("/", 1)[-1] in (MANIFEST, INDEX):
                path = os.path.join(scratch, "meta")
                download_file(join_url(src, name), path)
                with open(path, encoding="utf-8") as f:
                    expected.update(expected_digests(name, f.read()))
        for name in tqdm(_order(names), desc="sync", unit="file", disable=not progress):
            outcome = _copy_one(src, dst, name, expected.get(name), name in present, scratch)
            setattr(report, outcome, getattr(report, outcome) + 1)
            if outcome != "skipped":
                report.bytes_copied += os.path.getsize(os.path.join(scratch, "src"))
    return report


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code (a bad path or store: one `error: ...` line, 2)."""
    return run_tool(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m foundry.sync",
        description="Copy a checkpoint folder or dataset between stores (resumable, digest-verified). "
        "Per-store endpoints/credentials: STREAMING_STORAGE_PROFILES.",
    )
    parser.add_argument("src", help="source folder URL or path")
    parser.add_argument("dst", help="destination folder URL or path")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    require_path("src", args.src, fix="pass the checkpoint or dataset folder to copy, or its URL")
    report = sync(args.src, args.dst, progress=not args.quiet)
    summary: dict[str, Any] = {"src": redact(args.src), "dst": redact(args.dst), **vars(report)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
