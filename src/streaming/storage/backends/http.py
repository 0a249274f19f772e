"""Plain HTTP(S) downloads through the standard library (read only).

Design note: no SDK, so the status mapping is ours: 404 is not found, 401/403 access denied, the statuses in
``TRANSIENT_HTTP`` and connection failures are transient (retried by ``streaming.storage.transfer``).
"""

from __future__ import annotations

import urllib.error
import urllib.request

from streaming.storage.backends.base import TRANSIENT_HTTP, Backend, check_stated_size, copy_bounded
from streaming.storage.errors import TransientStorageError
from streaming.storage.url import redact

__all__ = ["HTTPBackend"]


class HTTPBackend(Backend):
    """Plain HTTP(S) downloads (read only)."""

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                length = resp.headers.get("Content-Length")
                check_stated_size(url, int(length) if length and length.isdigit() else None, max_bytes)
                copy_bounded(resp, path, url, max_bytes)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(f"{redact(url)}: HTTP 404") from None
            if err.code in (401, 403):
                raise PermissionError(f"{redact(url)}: HTTP {err.code}") from None
            if err.code in TRANSIENT_HTTP:
                raise TransientStorageError(f"{redact(url)}: HTTP {err.code}") from None
            raise
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
