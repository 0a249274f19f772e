"""Where writers put their files: a local directory, optionally mirrored to a remote URL.

Writers call ``publish_file`` for each finished shard file (from their worker threads) and
``publish_index`` once, after every shard file was published, so a remote ``index.json`` never names a
shard that is not there. This module resolves the ``out`` argument; transports come from
``streaming.storage``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from urllib.parse import urlparse

from streaming.storage.transfer import RetryPolicy, download_file, upload_file
from streaming.storage.url import join_url

__all__ = ["LocalOutput", "Output", "RemoteOutput", "resolve_output", "split_out"]


class Output:
    """Base: files are written into ``local``; subclasses mirror them elsewhere."""

    def __init__(self, local: str) -> None:
        self.local = local

    def publish_file(self, basename: str) -> None:
        """A shard file is complete at ``local/basename``."""

    def publish_index(self, basename: str) -> None:
        """``index.json`` is complete at ``local/basename`` (called after every shard file)."""

    def close(self) -> None:
        """The writer finished cleanly."""

    def abort(self) -> None:
        """The writer failed: publish nothing more."""

    def fetch_index(self, basename: str) -> bool:
        """Bring an existing published index to ``local/basename``; True if there was one."""
        return os.path.exists(os.path.join(self.local, basename))


class LocalOutput(Output):
    """A plain local directory: files are published by existing."""


class RemoteOutput(Output):
    """A local staging directory mirrored to a remote URL.

    Shard files are uploaded as they complete (from the writer's worker threads, so uploads run
    concurrently) and deleted locally unless ``keep_local``; ``index.json`` is uploaded last, only after every
    shard upload succeeded. A staging directory we created ourselves is removed at the end.
    """

    def __init__(
        self, local: str, remote: str, *, keep_local: bool, policy: RetryPolicy, owns_local: bool
    ) -> None:
        super().__init__(local)
        self.remote = remote
        self.keep_local = keep_local
        self.policy = policy
        self.owns_local = owns_local

    def _upload(self, basename: str) -> None:
        upload_file(os.path.join(self.local, basename), join_url(self.remote, basename), policy=self.policy)

    def publish_file(self, basename: str) -> None:
        self._upload(basename)
        if not self.keep_local:
            os.remove(os.path.join(self.local, basename))

    def publish_index(self, basename: str) -> None:
        self._upload(basename)

    def close(self) -> None:
        if not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)

    def abort(self) -> None:
        if self.owns_local and not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)

    def fetch_index(self, basename: str) -> bool:
        try:
            download_file(
                join_url(self.remote, basename), os.path.join(self.local, basename), policy=self.policy
            )
        except FileNotFoundError:
            return False
        return True


def split_out(out: str | tuple[str, str]) -> tuple[str | None, str | None]:
    """``out`` as ``(local, remote)``; a plain path is local,
    a URL with a scheme other than file is remote."""
    if isinstance(out, tuple | list):
        if len(out) != 2:
            raise ValueError(f"out must be a path, a URL or a (local_dir, remote_url) pair, got {out!r}")
        return str(out[0]), str(out[1])
    if not isinstance(out, str) or not out:
        raise ValueError(f"out must be a non-empty path or URL, got {out!r}")
    scheme = urlparse(out).scheme
    if scheme == "file":
        return urlparse(out).path, None
    # "C:" style drive letters are not schemes
    if scheme and len(scheme) > 1:
        return None, out
    return out, None


def resolve_output(
    out: str | tuple[str, str], *, keep_local: bool, retry: int, max_workers: int | None
) -> Output:
    """Build the writer output for ``out``: a local directory, a remote URL,
    or ``(local_dir, remote_url)``."""
    del max_workers
    local, remote = split_out(out)
    if remote is None:
        assert local is not None
        return LocalOutput(os.path.abspath(os.path.expanduser(local)))
    owns_local = local is None
    staging = tempfile.mkdtemp(prefix="streaming-writer-") if local is None else os.path.abspath(local)
    return RemoteOutput(
        staging, remote, keep_local=keep_local, policy=RetryPolicy(retries=retry), owns_local=owns_local
    )
