"""Checkpoint layout and discovery: names, the manifest that proves a checkpoint complete, finding the newest.

Layout of a save folder (local or remote)::

    <save_folder>/
      ep0-ba20/                 one directory per checkpoint (epoch, optimizer step)
        manifest.json           written LAST: every file with its size and sha256, step, world size, configs
        model.pt  state.pt      format "full" (rank 0 writes both)
        .metadata  __0_0.distcp ...  rank0.pt ... common.pt    format "sharded" (torch.distributed.checkpoint)
      latest the newest complete checkpoint's name (a convenience; discovery never trusts it)

Design note: a checkpoint exists only once its manifest does, and the manifest is published after every file
it lists, so a crash at any point leaves either a complete checkpoint or a torn directory that discovery skips
with a warning. Discovery lists the folder and reads manifests rather than following a `latest` pointer, which
is the failure the Composer `latest` symlink had on object stores.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from foundry.checkpoint.store import CheckpointStore
from stackbase.bounded import parse_json
from streaming.storage import redact
from streaming.util.safepath import UnsafePathError, safe_relpath

__all__ = [
    "HASH",
    "LATEST",
    "MANIFEST",
    "CheckpointInfo",
    "Manifest",
    "checkpoint_name",
    "fill_save_folder",
    "find_checkpoints",
    "find_latest",
    "open_checkpoint",
    "checked_file_name",
    "read_manifest",
]

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LATEST = "latest"
HASH = "sha256"
FORMAT_VERSION = 1
_NAME = re.compile(r"^ep(\d+)-ba(\d+)$")


def checked_file_name(name: object, *, source: str, field: str) -> str:
    """`name` (from a file we did not write) if it is a safe, already normalised relative file name.

    Raises:
        UnsafePathError: Naming `source`, `field` and the value (see `streaming.util.safepath`).
    """
    rel = safe_relpath(name, source=source, field=field)
    if rel != name:
        raise UnsafePathError(
            f"{source}: {field}={name!r} is not a normalised relative file name (expected {rel!r}); names in "
            "this file must be plain relative paths inside its folder"
        )
    return rel


def checkpoint_name(*, epoch: int, step: int) -> str:
    """`ep{epoch}-ba{step}` (Composer's naming)."""
    return f"ep{epoch}-ba{step}"


def fill_save_folder(
    folder: str, *, run_name: str | None = None, run_dir: str | os.PathLike[str] | None = None
) -> str:
    """`checkpoint.save_folder` with its placeholders filled: `{run_name}` and `{run_dir}` by those values.

    A placeholder whose value is not given stays as written. The pretrain task fills `{run_dir}` into the
    config it records (so `run.json` names the real folder); the saver and autoresume fill `{run_name}`.
    """
    if run_name is not None:
        folder = folder.replace("{run_name}", run_name)
    if run_dir is not None:
        folder = folder.replace("{run_dir}", os.fspath(run_dir))
    return folder


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object) -> bool:
    return _int(value) and 0 <= value <= _MAX_COUNT  # type: ignore[operator]


_MAX_COUNT = 2**62
_MAX_FILE_BYTES = 2**48
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS: dict[str, tuple[str, Any]] = {
    "step": ("an int >= 0", _count),
    "epoch": ("an int >= 0", _count),
    "format": ("'full' or 'sharded'", lambda v: v in ("full", "sharded")),
    "world_size": ("an int >= 1", lambda v: _count(v) and v >= 1),
    "weights_only": ("true or false", lambda v: isinstance(v, bool)),
    "files": ("an object of file name -> {bytes, sha256}", lambda v: isinstance(v, dict)),
    "tokens": ("an int >= 0", _count),
    "samples": ("an int >= 0", _count),
    "run_name": ("a string", lambda v: isinstance(v, str)),
    "model_config": ("an object", lambda v: isinstance(v, dict)),
    "extra": ("an object", lambda v: isinstance(v, dict)),
    "adapters_only": ("true or false", lambda v: isinstance(v, bool)),
    "format_version": ("an int", _int),
}
"""Each manifest key: what it must be, and the check (a manifest may come from anywhere)."""
_REQUIRED = {"step", "epoch", "format", "world_size", "weights_only", "files"}


@dataclass
class Manifest:
    """What `manifest.json` records."""

    step: int
    epoch: int
    format: str
    """`full` or `sharded`."""
    world_size: int
    weights_only: bool
    files: dict[str, dict[str, Any]]
    """Relative to the checkpoint directory: `{"bytes": n, "sha256": hex}`."""
    tokens: int = 0
    samples: int = 0
    run_name: str = ""
    model_config: dict[str, Any] = field(default_factory=dict)
    """The model config the weights belong to (`asdict` of the schema)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else worth keeping with the run (global batch size, W&B run id, ...)."""
    adapters_only: bool = False
    """The weights are the LoRA adapters only (`checkpoint.save_adapters_only`);
    the base comes from elsewhere."""
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        """Stable, human-readable JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str, *, source: str = MANIFEST) -> Manifest:
        """Parses what `to_json` wrote (unknown keys are an error: the file is not ours or is newer).

        Every file name is checked here, at parse time, with the path-safety rule (`streaming.util.safepath`):
        the manifest may come from anywhere, and its names are later joined onto local folders.

        Args:
            text: The JSON.
            source: Where it came from (its path or URL), for error messages.

        Raises:
            UnsafePathError: A file name that is absolute, has `..`, a drive letter or a backslash, or is not
                normalised (names `source`, the field and the value).
            ValueError: Not a manifest this library can read: not UTF-8 JSON, nested deeper than
                `stackbase.bounded.MAX_JSON_DEPTH`, a key missing or unknown, a value of the wrong type.
        """
        # nesting capped: one error, never a RecursionError
        data = parse_json(text, source=source)
        if not isinstance(data, dict):
            raise ValueError(f"{source}: not a checkpoint manifest (a JSON object)")
        version = data.get("format_version", 0)
        if _int(version) and version > FORMAT_VERSION:
            raise ValueError(
                f"{source}: manifest format_version {version} is newer than this library's "
                f"{FORMAT_VERSION}: upgrade foundry to load it"
            )
        missing = sorted(_REQUIRED - set(data))
        unknown = sorted(set(data) - set(_FIELDS))
        if missing or unknown:
            what = [f"missing {missing}" if missing else "", f"unknown keys {unknown}" if unknown else ""]
            raise ValueError(
                f"{source}: not a checkpoint manifest of this library ({' and '.join(w for w in what if w)})"
            )
        wrong = [
            f"{key} must be {kind}"
            for key, (kind, ok) in _FIELDS.items()
            if key in data and not ok(data[key])
        ]
        if wrong:
            raise ValueError(f"{source}: not a valid checkpoint manifest: {'; '.join(wrong)}")
        files = data["files"]
        for name, meta in files.items():
            checked_file_name(name, source=source, field="files")
            if not (
                isinstance(meta, dict)
                and _int(meta.get("bytes"))
                and 0 <= meta["bytes"] <= _MAX_FILE_BYTES
                and isinstance(meta.get(HASH), str)
                and _HEX64.fullmatch(meta[HASH])
            ):
                raise ValueError(
                    f'{source}: files[{name!r}] must be {{"bytes": int >= 0, "{HASH}": 64 hex digits}}, '
                    f"got {meta!r:.200}"
                )
        return cls(**data)


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint found in a store."""

    store: CheckpointStore
    name: str
    manifest: Manifest

    @property
    def url(self) -> str:
        """Where it is."""
        return self.store.url(self.name)


def read_manifest(store: CheckpointStore, name: str, *, scratch: str) -> Manifest:
    """The manifest of checkpoint `name` (FileNotFoundError when it has none; UnsafePathError for a file name
    that would leave the checkpoint's folder)."""
    rel = f"{name}/{MANIFEST}"
    return Manifest.from_json(store.read_text(rel, scratch=scratch), source=redact(store.url(rel)))


def find_checkpoints(store: CheckpointStore, *, scratch: str) -> list[CheckpointInfo]:
    """Every complete checkpoint in `store`, oldest first; torn ones are skipped with a warning.

    A checkpoint is complete when its manifest exists, parses, and every file it lists is present (locally
    also with the recorded size; remote digests are checked when the files are downloaded).
    """
    files = store.list()
    by_dir: dict[str, set[str]] = {}
    for rel in files:
        head, _, tail = rel.partition("/")
        if tail and _NAME.match(head):
            by_dir.setdefault(head, set()).add(tail)
    found: list[CheckpointInfo] = []
    for name, present in by_dir.items():
        where = redact(store.url(name))
        if MANIFEST not in present:
            log.warning("ignoring torn checkpoint %s: no %s (the save was interrupted)", where, MANIFEST)
            continue
        try:
            manifest = read_manifest(store, name, scratch=scratch)
        except UnsafePathError:
            # a crafted manifest is an error to see, not a torn save to skip
            raise
        except (ValueError, TypeError, OSError) as e:
            log.warning("ignoring checkpoint %s: unreadable %s (%s)", where, MANIFEST, e)
            continue
        missing = [f for f in manifest.files if f not in present]
        wrong = [
            f
            for f, meta in manifest.files.items()
            if f in present and (size := store.size(f"{name}/{f}")) is not None and size != meta["bytes"]
        ]
        if missing or wrong:
            log.warning(
                "ignoring torn checkpoint %s: %s",
                where,
                "; ".join(
                    ([f"missing {missing}"] if missing else []) + ([f"wrong size {wrong}"] if wrong else [])
                ),
            )
            continue
        found.append(CheckpointInfo(store, name, manifest))
    found.sort(key=lambda c: (c.manifest.step, c.manifest.epoch))
    return found


def find_latest(store: CheckpointStore, *, scratch: str) -> CheckpointInfo | None:
    """The newest complete checkpoint in `store`, or None."""
    found = find_checkpoints(store, scratch=scratch)
    return found[-1] if found else None


def open_checkpoint(path: str, *, scratch: str) -> CheckpointInfo:
    """The checkpoint at `path` (its directory, local or URL), or the newest one when `path` is a save folder.

    Raises:
        FileNotFoundError: Neither a checkpoint directory nor a folder holding a complete one.
    """
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    if name == MANIFEST:
        parent, _, name = parent.rpartition("/")
    if parent and name:
        store = CheckpointStore(parent)
        try:
            return CheckpointInfo(store, name, read_manifest(store, name, scratch=scratch))
        except FileNotFoundError:
            pass
    latest = find_latest(CheckpointStore(path), scratch=scratch)
    if latest is None:
        raise FileNotFoundError(
            f"{path}: no checkpoint there (a checkpoint directory holds {MANIFEST}; a save folder holds "
            "ep*-ba* directories). Check the path, or that the save that made it finished"
        )
    return latest
