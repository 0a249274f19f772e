"""The interface every storage backend implements, and the HTTP statuses they all treat as transient.

Design note: a backend copies single objects between a URL and a local file and lists a prefix; nothing else.
Each one maps its SDK's failures to three outcomes: ``FileNotFoundError`` / ``PermissionError`` (permanent,
never retried, the URL in the message), ``TransientStorageError`` (retried by ``streaming.storage.transfer``)
and anything else (a bug: propagated). ``sdk_errors`` is that mapping as a context manager, public so that
``streaming.storage.whole_file`` gives smart_open's failures the same messages.

A download may be bounded (``max_bytes``: what index.json declares): a backend refuses an object whose stated
size is larger before reading its body, and writes through ``BoundedWriter``, which stops at the bound, so a
store that lies about sizes (or a body longer than its header) costs at most ``max_bytes`` of disk.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from streaming.storage.url import redact, scheme_of
from streaming.util.sizes import SizeLimitExceeded

__all__ = ["TRANSIENT_HTTP", "Backend", "BoundedWriter", "check_stated_size", "copy_bounded"]

TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth a retry (timeouts, throttling, server errors)."""


class BoundedWriter:
    """A binary file being written that refuses to grow past ``max_bytes`` (None: unbounded)."""

    def __init__(self, f: IO[bytes], max_bytes: int | None, url: str) -> None:
        self._f = f
        self._max = max_bytes
        self._url = url
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = memoryview(data).nbytes
        if self._max is not None and self.written + n > self._max:
            raise SizeLimitExceeded(redact(self._url), self._max)
        self._f.write(data)
        self.written += n
        return n

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self._f.flush()


def check_stated_size(url: str, size: int | None, max_bytes: int | None) -> None:
    """Refuse an object whose stated size (a Content-Length, a file's stat) is past ``max_bytes``, before any
    of it is read."""
    if size is not None and max_bytes is not None and size > max_bytes:
        raise SizeLimitExceeded(f"{redact(url)} is {size} bytes", max_bytes)


def copy_bounded(src: IO[bytes], path: str, url: str, max_bytes: int | None) -> None:
    """Copy the stream ``src`` into the file ``path``, stopped past ``max_bytes``."""
    with open(path, "wb") as f:
        shutil.copyfileobj(src, BoundedWriter(f, max_bytes, url), 1 << 20)


class Backend(ABC):
    """Copy single objects between a URL and a local file; list a prefix."""

    ranged_reads = False
    """Whether ``read_range`` works (``streaming.storage.ranged`` splits large downloads only then)."""

    @abstractmethod
    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        """Write the object at ``url`` to ``path`` (the caller handles temp names and renames).

        Raises:
            SizeLimitExceeded: The object is (or turns out, while being written) larger than ``max_bytes``;
                nothing past ``max_bytes`` was written.
        """

    def read_range(
        self, url: str, start: int, end: int, *, timeout: float
    ) -> tuple[bytes, int | None] | None:
        """Bytes ``[start, end)`` of the object at ``url`` and the object's total size as the store states it
        (None if it does not), for ``streaming.storage.ranged``; ``(b"", None)`` when the store ignored the
        range or cannot satisfy it. None: this backend has no range reads (``ranged_reads`` is False)."""
        return None

    def quick_reader(self, url: str, *, timeout: float) -> Callable[[int, int], bytes | None] | None:
        """A cheaper way to read small ranges of ``url``, best effort: ``read(start, end)`` gives exactly
        those bytes or None (any error); None where this backend has none (use ``read_range``)."""
        return None

    def warm(self, url: str) -> None:
        """Load what this process's clients for ``url``'s store share (parsed SDK models), before DataLoader
        workers fork from it: each worker builds its own client (``get_backend`` is per process) and inherits
        what is loaded here. Best effort; nothing by default."""
        return None

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
