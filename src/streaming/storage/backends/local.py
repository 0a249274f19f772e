"""Local files as a backend: plain paths and ``file://`` URLs.

Design note: the same interface as the object stores, so a local folder can stand in for a bucket (tests,
single-node runs). Uploads write a temp file then rename, so a reader never sees a partial object.
"""

from __future__ import annotations

import errno
import os
import shutil

from streaming.storage.backends.base import Backend, check_stated_size, copy_bounded

__all__ = ["LocalBackend"]


class LocalBackend(Backend):
    """Plain paths and ``file://`` URLs."""

    @staticmethod
    def _path(url: str) -> str:
        return url[len("file://") :] if url.startswith("file://") else url

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        src = self._path(url)
        if not os.path.exists(src):
            # The OS's wording ("[Errno 2] No such file or directory: '<path>'"), as mosaicml-streaming gives.
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)
        if max_bytes is None:
            shutil.copyfile(src, path)
            return
        with open(src, "rb") as f:
            check_stated_size(url, os.fstat(f.fileno()).st_size, max_bytes)
            # bounded as it copies: the file may grow meanwhile
            copy_bounded(f, path, url, max_bytes)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        dst = self._path(url)
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = f"{dst}.tmp-{os.getpid()}"
        shutil.copyfile(path, tmp)
        os.replace(tmp, dst)

    def list(self, url: str) -> list[str]:
        root = self._path(url)
        return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)

    def delete(self, url: str) -> None:
        os.remove(self._path(url))
