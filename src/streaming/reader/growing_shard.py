"""The first sample of an iteration, read from its shard's raw file while that file is still being written.

Design note: preparing a shard (download, decompress) writes its raw file front to back under a temp name and
renames it when complete. The first sample of an iteration needs one sample of one shard, and on average half
of the file lies before it, so waiting for the whole file doubles the wait. Instead a helper thread prepares
that shard exactly as before (node locks, cache reservations, retries, temp file + rename: all unchanged), the
preparer announces the temp file it writes (``GrowingFile.announce``), and the reading thread reads the MDS
header and then the sample's bytes as soon as they have been written. They are the bytes the finished file
holds: a temp file is written once, front to back, by one writer (a retried download truncates it and
writes the same object again, so a short read is simply retried).

This path is taken only when nothing checks the file as a whole before use: the stream has no
``validate_hash`` and the shard is MDS. Whenever anything looks off (header, offsets, sizes), or the
preparation ends first (done elsewhere, failed, gave up for space), ``None`` is returned and the caller reads
the prepared file as usual, which raises any error with its full context.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from concurrent.futures import wait as wait_for

from streaming.format.index import ShardInfo
from streaming.reader.direct_read import sample_span, table_bytes

__all__ = ["GrowingFile", "early_sample_bytes"]

_MAX_POLL_S = 0.001


class GrowingFile:
    """The temp file another thread writes front to back, as announced by it; byte ranges read as they land.

    One writer announces (``announce``, from the preparing thread); one reader reads (``read``).
    """

    def __init__(self) -> None:
        self._path: str | None = None
        self._fd: int | None = None
        self._open: str | None = None

    def announce(self, path: str) -> None:
        """The writer's temp file (its name may change: a new attempt or the next file replaces it)."""
        self._path = path

    def read(self, start: int, end: int, done: Future[None]) -> bytes | None:
        """Bytes ``[start, end)`` of the announced file once they are written; None if ``done`` (the writer's
        job) finishes first."""
        delay = 0.0001
        while not done.done():
            data = self._try_read(start, end)
            if data is not None:
                return data
            wait_for([done], timeout=delay)
            delay = min(2 * delay, _MAX_POLL_S)
        return None

    def _try_read(self, start: int, end: int) -> bytes | None:
        path = self._path
        if path != self._open:
            self.close()
            try:
                self._fd = os.open(path, os.O_RDONLY) if path is not None else None
            except FileNotFoundError:  # not created yet, or already renamed into place
                self._fd = None
            self._open = path if self._fd is not None else None
        if self._fd is None or os.fstat(self._fd).st_size < end:
            return None
        data = os.pread(self._fd, end - start, start)
        # truncated by a retry meanwhile: look again
        return data if len(data) == end - start else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._open = None, None


def early_sample_bytes(growing: GrowingFile, info: ShardInfo, index: int, done: Future[None]) -> bytes | None:
    """The bytes of sample ``index`` of the MDS shard ``info``, read from its raw file as it is written
    (``growing``; the header first, checked against the index by ``direct_read.sample_span``), or None
    (see the module note)."""
    end = table_bytes(info)
    if end is None or not 0 <= index < info.samples:
        return None
    try:
        head = growing.read(0, end, done)
        span = sample_span(head, info, index) if head is not None else None
        return growing.read(*span, done) if span is not None else None
    finally:
        growing.close()
