"""Where checkpoints live: a local directory or an object-store prefix, behind one small interface.

Design note: every path here is *relative to the save folder* (`ep0-ba20/model.pt`), so the saver, the
finder and the loader never branch on local vs remote; the remote side reuses the streaming storage layer
(retries, backoff, credential redaction) instead of a second client stack.
"""

from __future__ import annotations

import builtins
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from stackbase.bounded import json_max_bytes, read_capped
from streaming.storage import RetryPolicy, download_file, is_remote, join_url, list_files, redact, upload_file
from streaming.storage.transfer import delete_file
from streaming.util.safepath import safe_relpath

__all__ = ["CheckpointStore", "transfer_policy"]


def transfer_policy(budget: float) -> RetryPolicy:
    """Retries of checkpoint transfers: transient failures for `budget` seconds
    (`checkpoint.transfer_budget`)."""
    return RetryPolicy(budget=budget, setting="checkpoint.transfer_budget")


def _publish(dst: str, write: Callable[[BinaryIO], object]) -> None:
    """Create the file `dst` atomically on whatever filesystem holds it: `write` fills a temp file beside it,
    which is flushed to disk and renamed into place, then the folder entry is flushed too. A rename never
    crosses filesystems here (a save folder on a mounted volume got `EXDEV` when the temp file lived in the
    run folder), and a crash leaves either the old file or the whole new one, never a part."""
    folder = os.path.dirname(dst) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = f"{dst}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        # some filesystems cannot flush a folder; the rename is still atomic
        pass
    finally:
        os.close(fd)


class CheckpointStore:
    """Files under `root` (a local directory or a URL), addressed by relative paths.

    Args:
        root: The save folder.
        policy: Retries of remote transfers (default: `transfer_policy` with the default budget).
    """

    def __init__(self, root: str, *, policy: RetryPolicy | None = None) -> None:
        self.policy = policy or transfer_policy(300.0)
        if root.startswith("file://"):
            root = root[len("file://") :]
        self.root = root.rstrip("/") if is_remote(root) else str(Path(root).expanduser())
        self.remote = is_remote(root)

    def __repr__(self) -> str:
        return f"CheckpointStore({redact(self.root)!r})"

    def url(self, rel: str) -> str:
        """The full URL or path of `rel`."""
        return join_url(self.root, rel) if self.remote else os.path.join(self.root, rel)

    def local_path(self, rel: str) -> str | None:
        """The path of `rel` on this machine (None for remote stores)."""
        return None if self.remote else os.path.join(self.root, rel)

    def list(self, under: str = "") -> list[str]:
        """Every file under the root (or under its sub-folder `under`), relative to the root, sorted ([] when
        nothing is there yet).

        Raises:
            streaming.util.safepath.UnsafePathError: A remote key whose name relative to the root is unsafe
                (`..`, absolute, backslash, ...): listings are untrusted names, later joined onto local
                folders.
        """
        if not self.remote:
            top = os.path.join(self.root, under)
            if not os.path.isdir(top):
                return []
            return sorted(
                os.path.relpath(os.path.join(d, f), self.root) for d, _, files in os.walk(top) for f in files
            )
        prefix = self.root + "/"
        where = prefix + (under.rstrip("/") + "/" if under else "")
        listed = [u[len(prefix) :] for u in list_files(where, policy=self.policy) if u.startswith(prefix)]
        # checked, but kept as listed: it is the key to read or delete
        for rel in listed:
            safe_relpath(rel, source=f"listing of {redact(where)}", field="key")
        return sorted(listed)

    def size(self, rel: str) -> int | None:
        """Bytes of a local file (None when missing, or for remote stores)."""
        path = self.local_path(rel)
        if path is None or not os.path.exists(path):
            return None
        return os.path.getsize(path)

    def put(self, path: str, rel: str) -> None:
        """Publishes the local file `path` as `rel` (an upload, or an atomic move/copy into place)."""
        if self.remote:
            upload_file(path, self.url(rel), policy=self.policy)
            return
        dst = self.url(rel)
        if os.path.abspath(path) == os.path.abspath(dst):
            return
        with open(path, "rb") as src:
            _publish(dst, lambda f: shutil.copyfileobj(src, f, 1 << 20))

    def put_text(self, text: str, rel: str, *, scratch: str) -> None:
        """Publishes `text` as `rel` atomically: written under its destination and renamed there (any
        filesystem), or uploaded from a file in the `scratch` directory."""
        data = text.encode("utf-8")
        if not self.remote:
            _publish(self.url(rel), lambda f: f.write(data))
            return
        os.makedirs(scratch, exist_ok=True)
        tmp = os.path.join(scratch, f".{os.path.basename(rel)}.tmp-{os.getpid()}")
        Path(tmp).write_bytes(data)
        try:
            upload_file(tmp, self.url(rel), policy=self.policy)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def get(
        self, rel: str, path: str, *, expected: dict[str, str] | None = None, algo: str | None = None
    ) -> None:
        """Copies `rel` to the local `path`, checking its digest when `algo` and `expected` are given."""
        download_file(self.url(rel), path, expected_hashes=expected, validate_hash=algo, policy=self.policy)

    def read_text(self, rel: str, *, scratch: str) -> str:
        """The text of a (small) file.

        Raises:
            ValueError: It is not UTF-8 (naming it and the first bad byte).
        """
        local = self.local_path(rel)
        if local is not None:
            return self._decode(read_capped(local, source=redact(self.url(rel))), rel)
        os.makedirs(scratch, exist_ok=True)
        tmp = os.path.join(scratch, f".{os.path.basename(rel)}.read-{os.getpid()}")
        try:
            # a manifest or marker: one request, no larger than a JSON file may be
            cap = json_max_bytes()
            download_file(self.url(rel), tmp, policy=self.policy, max_bytes=cap, ranged=None)
            return self._decode(read_capped(tmp, source=redact(self.url(rel))), rel)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _decode(self, data: bytes, rel: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{redact(self.url(rel))}: not UTF-8 text (byte {err.start})") from None

    def delete(self, rel: str) -> None:
        """Removes one file (missing files are fine)."""
        if self.remote:
            delete_file(self.url(rel), policy=self.policy)
            return
        path = self.url(rel)
        if os.path.exists(path):
            os.remove(path)

    def delete_dir(self, name: str, files: builtins.list[str]) -> None:
        """Removes checkpoint `name` (`files` relative to it): its manifest first, so it is never seen
        half-deleted, then the rest."""
        ordered = ["manifest.json"] + [f for f in files if f != "manifest.json"]
        for rel in ordered:
            self.delete(f"{name}/{rel}")
        if not self.remote:
            shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
