"""Where writers put their files: a local directory, optionally mirrored to a remote URL.

Writers call ``publish_file`` for each finished shard file (from their worker threads) and
``publish_index`` once, after every shard file was published, so a remote ``index.json`` never names a
shard that is not there. This module resolves the ``out`` argument; remote transports come from the
storage layer.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

__all__ = ["LocalOutput", "Output", "resolve_output", "split_out"]


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


class LocalOutput(Output):
    """A plain local directory: files are published by existing."""


def split_out(out: str | tuple[str, str]) -> tuple[str | None, str | None]:
    """``out`` as ``(local, remote)``; a plain path is local, a URL with a scheme other than file is remote."""
    if isinstance(out, tuple | list):
        if len(out) != 2:
            raise ValueError(f"out must be a path, a URL or a (local_dir, remote_url) pair, got {out!r}")
        return str(out[0]), str(out[1])
    if not isinstance(out, str) or not out:
        raise ValueError(f"out must be a non-empty path or URL, got {out!r}")
    scheme = urlparse(out).scheme
    if scheme == "file":
        return urlparse(out).path, None
    if scheme and len(scheme) > 1:  # "C:" style drive letters are not schemes
        return None, out
    return out, None


def resolve_output(
    out: str | tuple[str, str], *, keep_local: bool, retry: int, max_workers: int | None
) -> Output:
    """Build the writer output for ``out``.

    Raises:
        ValueError: For remote URLs until a storage backend for the scheme is installed.
    """
    local, remote = split_out(out)
    if remote is not None:
        raise ValueError(
            f"remote output {remote!r}: writing to object storage is not available in this build yet; "
            "write to a local directory"
        )
    assert local is not None
    return LocalOutput(os.path.abspath(os.path.expanduser(local)))
