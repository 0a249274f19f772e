"""The interface every storage backend implements, and the HTTP statuses they all treat as transient.

Design note: a backend copies single objects between a URL and a local file and lists a prefix; nothing else.
Each one maps its SDK's failures to three outcomes: ``FileNotFoundError`` / ``PermissionError`` (permanent,
never retried, the URL in the message), ``TransientStorageError`` (retried by ``streaming.storage.transfer``)
and anything else (a bug: propagated). ``sdk_errors`` is that mapping as a context manager, public so that
``streaming.storage.whole_file`` gives smart_open's failures the same messages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from streaming.storage.url import redact, scheme_of

__all__ = ["TRANSIENT_HTTP", "Backend"]

TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth a retry (timeouts, throttling, server errors)."""


class Backend(ABC):
    """Copy single objects between a URL and a local file; list a prefix."""

    @abstractmethod
    def download(self, url: str, path: str, *, timeout: float) -> None:
        """Write the object at ``url`` to ``path`` (the caller handles temp names and renames)."""

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        raise PermissionError(f"{redact(url)}: this backend is read-only")

    def list(self, url: str) -> list[str]:
        """Full URLs of the objects under the prefix ``url``."""
        raise NotImplementedError(f"{redact(url)}: listing is not supported for {scheme_of(url)}://")

    def delete(self, url: str) -> None:
        raise PermissionError(f"{redact(url)}: this backend is read-only")

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        """Inside the block, the SDK's failures become ``FileNotFoundError`` / ``PermissionError`` /
        ``TransientStorageError`` naming ``redact(url)``; anything else propagates unchanged."""
        yield

    def _call(self, url: str, fn: Callable[[], Any]) -> Any:
        with self.sdk_errors(url):
            return fn()
