"""The samples of an iteration's first batch, read straight from their remote shards as byte ranges.

Design note: a shuffled batch draws its samples from across the dataset (with py1e's default block of 262,144
samples, 32 samples of a 20,000-sample dataset come from 15-19 of its 20 shards), so the first batch waited
for most of the dataset to download: 1.7-6 s through a 30 ms, 50 MB/s link for 164 MB. Yet it needs only 32
samples. So a worker reads the first ``batch_size`` samples of its iteration directly from the remote MDS
shards, while every shard downloads as before: per shard, one range request for the header (the sample count
and the offset table, checked against the index as ``streaming.reader.growing_shard`` does), then one per
sample for its bytes. That is two round trips instead of most of the dataset, and ~1-2% more bytes
(the batch's samples and the headers, fetched again with the shards).

It applies to a sample whose shard is remote, MDS, stored uncompressed, not hash-checked (a sample cannot be
verified without its whole file) and not already on disk, on a backend with range reads
(``Backend.ranged_reads``). Anything off (an error, a short read, a header that disagrees with the index)
gives ``None`` and the caller waits for the shard as usual, which raises any error with its full context.

Concurrency: ``threads`` pool threads each fetch one header or one sample; a sample's task waits for its
shard's header future, which is submitted before it to the same FIFO pool, so it is already running or done
when waited on (no task waits for one queued behind it: no deadlock). Futures are handed back to the one
iterating thread. The pool lives for one iteration (``close``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from streaming.format.index import ShardInfo

__all__ = ["DirectReads", "sample_span", "table_bytes"]

_U32 = struct.Struct("<I")

ReadBytes = Callable[[int, int], bytes | None]
"""``read(start, end)``: bytes ``[start, end)`` of one remote object, or None if they could not be read."""


def table_bytes(info: ShardInfo) -> int | None:
    """Bytes at the front of MDS shard ``info`` holding its sample count and offset table; None where the
    index rules that out (not MDS, or a table larger than the file)."""
    end = 4 + 4 * (info.samples + 1)
    return end if info.format == "mds" and end <= info.raw_data.bytes else None


def sample_span(head: bytes, info: ShardInfo, index: int) -> tuple[int, int] | None:
    """Where sample ``index`` lies in MDS shard ``info``, from the shard's first ``table_bytes(info)`` bytes
    ``head``; None unless the header agrees with the index (sample count, offsets inside the file, in
    order, the last at the file's end)."""
    n, size, end = info.samples, info.raw_data.bytes, table_bytes(info)
    if end is None or len(head) < end or not 0 <= index < n or _U32.unpack_from(head, 0)[0] != n:
        return None
    offsets = memoryview(head)[4:end].cast("I")
    lo, hi = offsets[index], offsets[index + 1]
    if offsets[0] < end or offsets[n] != size or not end <= lo <= hi <= size:
        return None
    return lo, hi


class DirectReads:
    """``reads.sample(key, info, index, read)`` -> a future of sample ``index``'s bytes (or None), read from
    the remote object that ``read`` reads; one header request per ``key`` (the shard)."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="direct-read")
        self._heads: dict[int, Future[bytes | None]] = {}

    def sample(self, key: int, info: ShardInfo, index: int, read: ReadBytes) -> Future[bytes | None]:
        head = self._heads.get(key)
        if head is None:
            end = table_bytes(info)
            head = self._heads[key] = self._pool.submit(lambda: read(0, end) if end is not None else None)
        return self._pool.submit(self._sample, head, info, index, read)

    @staticmethod
    def _sample(head: Future[bytes | None], info: ShardInfo, index: int, read: ReadBytes) -> bytes | None:
        table = head.result()
        span = sample_span(table, info, index) if table is not None else None
        return read(*span) if span is not None else None

    def close(self) -> None:
        """Cancel what has not started; do not wait for what has (each read ends on its own timeout)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
