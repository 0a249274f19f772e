"""Where run directories live: a local folder or an object-store prefix (`s3://`, `gs://`, `azure://`).

Design note: every reader in `foundry.runs` goes through `RunRoot`, which lists the root once (one recursive
listing: `streaming.storage.list_files` for a URL, a pruned `os.walk` locally) and reads files whole
(`open_url`), so the same code reports on `outputs/` and on a bucket that `foundry.sync` or the checkpoint
uploads filled. A *run* is a folder holding `run.json`, `events.jsonl` or `config.yaml`; its name is its
path under the root (`quickstart`, `multirun/lr/0_optimizer.lr=0.001`). Sizes come from the local file
system only (object listings carry no sizes; checkpoint sizes come from their manifests instead).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

from foundry.rundir import layout
from streaming.storage import is_remote, list_files, open_url

__all__ = ["RUN_MARKERS", "RunRoot", "resolve_run"]

RUN_MARKERS = layout.MARKERS
"""A folder holding one of these is a run directory."""
_PRUNE = {
    *layout.UNLISTED,
    "wandb",
    "icl_examples",
    "hf",
}
"""Folders a local walk does not descend into (large or never a run)."""


@dataclass
class RunRoot:
    """A folder or URL prefix holding run directories (see the module note)."""

    root: str
    _names: list[str] | None = field(default=None, repr=False)

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

    def url(self, rel: str, name: str = "") -> str:
        """The local path or URL of `name` inside run `rel` (`.` is the root itself)."""
        parts = [p for p in (rel, name) if p and p != "."]
        if not parts:
            return self.root
        sep = "/" if self.remote else os.sep
        return self.root.rstrip("/" + os.sep) + sep + "/".join(parts)

    def names(self) -> list[str]:
        """Every file under the root, as a `/`-separated path relative to it (listed once, then cached)."""
        if self._names is None:
            self._names = self._list_remote() if self.remote else self._list_local()
        return self._names

    def _list_remote(self) -> list[str]:
        prefix = self.root.rstrip("/") + "/"
        return sorted(u[len(prefix) :] for u in list_files(prefix) if u.startswith(prefix))

    def _list_local(self) -> list[str]:
        base = Path(self.root)
        out: list[str] = []
        for folder, dirs, files in os.walk(base):
            rel = Path(folder).relative_to(base)
            dirs[:] = sorted(d for d in dirs if d not in _PRUNE and not d.startswith("."))
            out.extend((rel / f).as_posix() for f in files)
        return sorted(n.removeprefix("./") for n in out)

    def runs(self) -> list[str]:
        """The run directories under the root (relative names, sorted; `.` when the root is one)."""
        found = set()
        for name in self.names():
            folder, _, base = name.rpartition("/")
            # not inside checkpoints/
            if base in RUN_MARKERS and not _PRUNE.intersection(folder.split("/")):
                found.add(folder or ".")
        return sorted(found)

    def files(self, rel: str, sub: str = "") -> list[str]:
        """Files under run `rel` (and under `sub` inside it), relative to that folder; listed on demand."""
        prefix = "/".join(p for p in (rel, sub) if p and p != ".")
        if self.remote:
            url = self.url(prefix) + "/"
            return sorted(u[len(url) :] for u in list_files(url) if u.startswith(url))
        base = Path(self.url(prefix))
        if not base.is_dir():
            return []
        return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())

    def read_text(self, rel: str, name: str) -> str | None:
        """The content of `name` in run `rel`, or None when it does not exist."""
        try:
            with open_url(self.url(rel, name), "r") as f:
                return str(f.read())
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def size(self, rel: str, name: str) -> int | None:
        """Bytes of a local file (None for a URL or a missing file)."""
        if self.remote:
            return None
        try:
            return os.path.getsize(self.url(rel, name))
        except OSError:
            return None

    def mtime(self, rel: str, name: str) -> float | None:
        """Modification time of a local file (None for a URL or a missing file)."""
        if self.remote:
            return None
        try:
            return os.path.getmtime(self.url(rel, name))
        except OSError:
            return None


def resolve_run(arg: str, *, root: str) -> tuple[RunRoot, str]:
    """A `RUN` argument as (root, run name): a URL or an existing path is its own root; else a run name (or a
    unique prefix of one) under `root`.

    Raises:
        FileNotFoundError: `arg` names no run under `root` (the message lists the runs there).
    """
    if is_remote(arg) or Path(arg).exists():
        return RunRoot(arg.rstrip("/") if is_remote(arg) else str(Path(arg))), "."
    base = RunRoot(root)
    rel = arg.strip("/")
    names = base.names()
    if any(n.startswith(rel + "/") for n in names):
        return base, rel
    # a unique prefix (`runs list` shortens long names)
    matches = [r for r in base.runs() if r.startswith(rel)]
    if len(matches) == 1:
        return base, matches[0]
    runs = base.runs()
    close = difflib.get_close_matches(rel, runs, n=1, cutoff=0.6) or difflib.get_close_matches(
        rel, [r.rsplit("/", 1)[-1] for r in runs], n=1, cutoff=0.6
    )
    # issue 40: `runs show quickstrat` listed every run instead of naming the one meant
    if close:
        raise FileNotFoundError(f"no run {arg!r} under {root}: did you mean {close[0]!r}?")
    known = ", ".join(runs[:20]) or "none"
    raise FileNotFoundError(
        f"no run {arg!r} under {root} (runs there: {known}); "
        "pass a run name, a run folder or an s3:// / gs:// URL"
    )
