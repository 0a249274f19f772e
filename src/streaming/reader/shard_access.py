"""Per-process shard access of a ``StreamingDataset``: preparing shards (ahead of use) and reading samples.

Design note: shards are prepared (``prepare``) ahead of use: a remote stream's are downloaded once per node
through ``streaming.cache.ShardCache``; a local stream's are checked and decompressed atomically by
``Stream.prepare_shard``. When there is work to overlap (remote or compressed shards), only the shard of a
chunk's first sample is prepared before that sample is yielded; the chunk's other shards (by first use) and
the next chunk's are prepared in a thread pool, so ahead-of-use work is bounded by the chunk size
(``predownload``) and the first sample never waits for shards it does not need. The iteration's very first
sample does not even wait for all of its own shard: a pool thread prepares that shard while this thread reads
the sample from the front of its raw file as it is written (``streaming.reader.growing_shard``; not with
``validate_hash``). From a remote store, the first batch does not wait for shards at all: its samples are read
straight from their remote shards as byte ranges while every shard downloads
(``streaming.reader.direct_read``). With a ``cache_limit``, a remote shard is opened through
``ShardCache.acquire`` (prepared and pinned in one step, so no other reader or job can evict it first) and
stays pinned while its mapped file is viewed by a reader or a sample; at each chunk a reader lets go of the
shards its plan does not read soon (``_KEEP_AHEAD``; a reader that needs room first lets go of all it
does not read now); when the cache is full of shards in use, the shard is read into memory instead
(``streaming.cache.shards`` states the protocol). One ``ShardAccess``
lives in each process (rank or DataLoader worker) and is never pickled: its readers, pins and pool are process
state.
"""

from __future__ import annotations

import bisect
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from streaming.cache import CachedShard, ShardCache
from streaming.format.hashing import HASH_OFF, hash_to_check
from streaming.format.index import ShardInfo, recorded_digests
from streaming.format.mds import MDSSchema, ShardFormatError
from streaming.format.reader import FileMap, ShardReader, check_shard_safe, open_shard
from streaming.reader.batch_read import SampleRef
from streaming.reader.direct_read import DirectReads, ReadBytes
from streaming.reader.growing_shard import GrowingFile, early_sample_bytes
from streaming.reader.stream import Stream
from streaming.storage.backends import get_backend
from streaming.storage.ranged import RangeBudget
from streaming.storage.transfer import DEFAULT_RANGED
from streaming.storage.url import join_url

__all__ = ["ShardAccess", "plan_spans"]

_DIRECT_THREADS = 16
"""Range requests in flight at once for an iteration's directly read samples (two round trips for a batch)."""

_DEMAND_SAMPLES = 1024
"""With a ``cache_limit``, how many samples past the current chunk (a batch) the plan is looked at: their
shards' next uses order eviction here and are published to the other readers of the cache
(``streaming.cache.demand``)."""


_PLAN_EVERY = 64
"""With a ``cache_limit``, how many samples a reader goes between two looks at its plan (``plan_spans`` over
the chunks of the next ``_DEMAND_SAMPLES`` samples, ~0.3 ms): the next uses in between are the last look's,
moved along by the samples read since (``_next_use``)."""


_KEEP_AHEAD = _PLAN_EVERY
"""With a ``cache_limit``, a reader keeps (and pins) the shards its plan reads within this many samples of its
current chunk or again in the plan's window (``_used_soon``), not only the current and next chunk's: a shuffle
block's shards come back within a few chunks, and a shard let go is opened, pinned and mapped again (a warm
cache: 3.9 -> 1.0 opens a shard and epoch, 0.54 -> 0.44 s of CPU for 24,000 samples in batches of 8).
Eviction order keeps them anyway (``_next_use``). Not for a plan window after the reader found the cache full
(``_on_full``): extra pins there keep the other readers waiting for room (3 jobs on a tiny cache ran 2-4x
slower)."""


def plan_spans(shard_ends: np.ndarray, chunks: Sequence[np.ndarray]) -> dict[int, tuple[int, int]]:
    """Each shard's first and last position in the samples of ``chunks`` (sample ids, in order), counted from
    the start of the first chunk (``shard_ends``: cumulative samples at the end of each shard)."""
    if not chunks:
        return {}
    per_sample = np.searchsorted(shard_ends, np.concatenate(chunks), side="right")
    if not len(per_sample):
        return {}
    # one stable sort: each shard's positions in order, its first and last at the ends of its run
    order = np.argsort(per_sample, kind="stable")
    by_shard = per_sample[order]
    cuts = np.flatnonzero(by_shard[1:] != by_shard[:-1]) + 1
    starts, stops = np.concatenate(([0], cuts)), np.concatenate((cuts, [len(order)])) - 1
    return dict(zip(by_shard[starts].tolist(), zip(order[starts].tolist(), order[stops].tolist())))


class ShardAccess:
    """Readers, preparation and the prefetch pool over a dataset's shards, for one process.

    Args:
        streams: The dataset's streams.
        shards: Every shard, in global shard order (may be lazy; an item is read only for shards used).
        stream_per_shard: The stream of each shard.
        shard_ends: Cumulative samples at the end of each shard.
        any_compressed: Whether some shard is stored compressed.
        cache_limit: The node's cache budget in bytes (None: unlimited).
        allow_unsafe_types: Allow ``pkl`` columns.
        download_concurrency: Threads preparing shards ahead of use.
        direct_samples: How many samples at the start of an iteration are read straight from their remote
            shards while those download (``streaming.reader.direct_read``; the batch size; 0: none).
    """

    def __init__(
        self,
        *,
        streams: Sequence[Stream],
        shards: Sequence[ShardInfo],
        stream_per_shard: np.ndarray,
        shard_ends: np.ndarray,
        any_compressed: Callable[[], bool],
        cache_limit: int | None,
        allow_unsafe_types: bool,
        download_concurrency: int,
        direct_samples: int = 0,
    ) -> None:
        self.streams = streams
        self.shards = shards
        self.stream_per_shard = stream_per_shard
        self.shard_ends = shard_ends
        self.any_compressed = any_compressed
        self.cache_limit = cache_limit
        self.allow_unsafe_types = allow_unsafe_types
        self.download_concurrency = download_concurrency
        self.direct_samples = direct_samples
        self.readers: dict[int, ShardReader] = {}
        self.prepared: set[int] = set()
        self.cache: ShardCache | None = None
        self.active_shards: set[int] = set()
        # with a cache_limit: each shard's first and last position in the plan as last looked at, and the
        # samples read since that look
        self._spans: dict[int, tuple[int, int]] = {}
        self._read_since_plan = 0
        # a reader of this process found the cache full since the last chunk (``_on_full``)
        self._crowded = False
        self._ends: list[int] | None = None

    def shard_cache(self) -> ShardCache:
        """The node-level cache over every shard (built lazily)."""
        if self.cache is None:
            shards = []
            for info, si in zip(self.shards, self.stream_per_shard.tolist()):
                stream = self.streams[si]
                shards.append(
                    CachedShard(
                        local=stream.dirname,
                        remote=stream.remote_dirname,
                        info=info,
                        policy=stream.retry_policy(),
                        validate_hash=stream.validate_hash,
                        keep_zip=bool(stream.keep_zip),
                    )
                )
            # the rank's workers share the node's link: their downloads split it
            worker = get_worker_info()
            self.cache = ShardCache(
                shards=shards,
                cache_limit=self.cache_limit,
                ranged=RangeBudget(DEFAULT_RANGED, sharers=worker.num_workers if worker is not None else 1),
            )
        return self.cache

    def prepare(
        self,
        shard_id: int,
        *,
        reader: bool = False,
        prefetch: bool = False,
        on_tmp: Callable[[str], None] | None = None,
    ) -> None:
        """Make shard ``shard_id`` readable locally. When the cache is full of shards in use, the iterating
        thread (``reader``) first drops its own idle readers, and a ``prefetch`` gives up at once (the shard
        is prepared when needed). ``on_tmp`` is told the temp name of the raw data file if this call writes
        it."""
        stream = self.streams[int(self.stream_per_shard[shard_id])]
        if stream.is_remote:
            if not self.shard_cache().prepare(
                shard_id,
                next_use=self._next_use,
                on_full=self._on_full(reader),
                wait=not prefetch,
                on_tmp=on_tmp,
            ):
                return
        else:
            stream.prepare_shard(self.shards[shard_id], on_tmp=on_tmp)
            if self._checks_hash(shard_id):
                self.shard_cache().verify(shard_id)
        self.prepared.add(shard_id)

    def _checks_hash(self, shard_id: int) -> bool:
        """Whether shard ``shard_id``'s files are hash-verified
        (its stream's ``validate_hash`` and its digests)."""
        stream = self.streams[int(self.stream_per_shard[shard_id])]
        return hash_to_check(stream.validate_hash, recorded_digests(self.shards[shard_id])) is not None

    def _next_use(self, k: int) -> float:
        """Eviction order for this worker's view of the plan: the position of shard ``k``'s next sample from
        the start of the chunk being read (up to ``_DEMAND_SAMPLES`` samples after it; 0 for a shard between
        its first and last use, as the plan was last looked at ``_PLAN_EVERY`` samples or less ago); shards
        needed by no reader go first (least recently used first). A prefetch evicts only shards needed later
        than the one it fetches. Read by pool threads while the iterating thread moves the plan along: an
        order for eviction, so a look that mixes the old plan with the new count is harmless."""
        span = self._spans.get(k)
        if span is None or span[1] < self._read_since_plan:
            return float("inf")
        return max(span[0] - self._read_since_plan, 0)

    def _used_soon(self) -> set[int]:
        """The shards the plan (as last looked at, ``_DEMAND_SAMPLES`` deep) reads within ``_KEEP_AHEAD``
        samples of the current chunk's start, or reads again after a read already made in that window."""
        read = self._read_since_plan
        return {k for k, (first, last) in self._spans.items() if last >= read and first - read <= _KEEP_AHEAD}

    def _on_full(self, reader: bool) -> Callable[[], None] | None:
        if not reader:
            return None

        def full() -> None:  # the iterating thread found no room: it keeps only what it reads for a while
            self._crowded = True
            self.release(set())

        return full

    def release(self, keep: set[int]) -> None:
        """Forget readers of shards outside ``keep``; a shard's cache pin goes with the last view of its
        mapped file (``ShardCache.pin_while_alive``: the reader, samples still held), then it can be
        evicted."""
        for shard_id in [k for k in self.readers if k not in keep]:
            del self.readers[shard_id]
            self.prepared.discard(shard_id)
        if self.cache is not None:
            self.cache.drain()

    def forget(self, shard_id: int) -> None:
        """Drop this process's reader of shard ``shard_id`` (its pin goes with the last view of its file)."""
        self.readers.pop(shard_id, None)
        self.prepared.discard(shard_id)
        if self.cache is not None:
            self.cache.drain()

    def reader(self, shard_id: int) -> ShardReader:
        """The open reader of a shard (prepared first if needed; prepared again if evicted meanwhile)."""
        reader = self.readers.get(shard_id)
        if reader is None:
            reader = self._open(shard_id)
            self.readers[shard_id] = reader
        return reader

    def _open(self, shard_id: int) -> ShardReader:
        """Open shard ``shard_id``. With a cache limit a remote shard is prepared and pinned in one step
        (``ShardCache.acquire``): no other reader or job can evict it before it is opened or while it is open;
        when the cache stays full of shards in use, the shard is read into memory instead, not kept."""
        stream, info = self.streams[int(self.stream_per_shard[shard_id])], self.shards[shard_id]
        pin = stream.is_remote and self.cache_limit is not None
        for attempt in range(3):
            if pin:
                cache = self.shard_cache()
                if not cache.acquire(shard_id, next_use=self._next_use, on_full=self._on_full(True)):
                    files = cache.read_unkept(shard_id)
                    return open_shard(
                        stream.dirname, info, allow_unsafe_types=self.allow_unsafe_types, files=files
                    )
                self.prepared.add(shard_id)
            elif shard_id not in self.prepared:
                self.prepare(shard_id, reader=True)
            try:
                reader = open_shard(stream.dirname, info, allow_unsafe_types=self.allow_unsafe_types)
            except FileNotFoundError:  # deleted by another process (a job with no pins; a failed hash check)
                self.prepared.discard(shard_id)
                if pin:
                    self.shard_cache().unpin(shard_id)
                if attempt == 2 or not stream.is_remote:
                    raise
                continue
            if pin:  # pinned from now on by its mapped files, for as long as anything views them
                for owner in {
                    id(b.obj): b.obj for b in reader.buffers if isinstance(b.obj, FileMap)
                }.values():
                    self.shard_cache().pin_while_alive(shard_id, owner)
                self.shard_cache().unpin(shard_id)
            return reader
        raise AssertionError("unreachable")

    def sample(self, sample_id: int) -> dict[str, Any]:
        """Sample ``sample_id`` (in range) of the concatenation of all shards."""
        # a list: bisect on it is several times faster than searchsorted on one id
        if self._ends is None:
            self._ends = self.shard_ends.tolist()
        shard = bisect.bisect_right(self._ends, sample_id)
        return self.reader(shard)[sample_id - (self._ends[shard - 1] if shard else 0)]

    def sample_ref(self, sample_id: int) -> SampleRef:
        """Sample ``sample_id`` unread: its shard's reader and in-shard index
        (``streaming.reader.batch_read``)."""
        if self._ends is None:
            self._ends = self.shard_ends.tolist()
        shard = bisect.bisect_right(self._ends, sample_id)
        return SampleRef(self.reader(shard), sample_id - (self._ends[shard - 1] if shard else 0))

    def iter_chunks(self, chunks: Iterator[np.ndarray], *, refs: bool = False) -> Iterator[Any]:
        """The samples of each chunk of sample ids, preparing shards ahead of use (see the module note); as
        unread ``SampleRef`` s when ``refs`` (the batch read path)."""
        read = self.sample_ref if refs else self.sample
        pool = self._pool()
        pending: dict[int, Future[None]] = {}
        started = False  # whether anything was submitted to the pool
        # position in the first chunk -> its sample's bytes
        direct: dict[int, Future[bytes | None]] = {}
        reads: DirectReads | None = None
        # the chunks after the current one this process has looked at (one, or with a cache_limit, once the
        # first sample is out, those of the next _DEMAND_SAMPLES samples)
        window: deque[np.ndarray] = deque()
        ahead_samples = 0
        demand = self.cache_limit is not None and any(s.is_remote for s in self.streams)
        later = False  # past the first chunk
        done = 0  # samples of the chunks before the current one
        keep_soon_from = 0  # `done` from which a reader keeps the shards it reads soon again (`_used_soon`)
        published: int | None = None  # `done` when the demand board was last published (None: not yet)
        planned: int | None = None  # `done` at the last look at the plan (None: none yet, or not deep)
        try:
            current = next(chunks, None)
            while current is not None:
                deep = self.cache_limit is not None and later
                while (not window or (deep and ahead_samples < _DEMAND_SAMPLES)) and (
                    seen := next(chunks, None)
                ) is not None:
                    window.append(seen)
                    ahead_samples += len(seen)
                upcoming = window[0] if window else None
                per_sample = np.searchsorted(self.shard_ends, current, side="right")
                shards = list(dict.fromkeys(per_sample.tolist()))  # in order of first use
                per_next: list[int] = []
                if upcoming is not None:
                    per_next = np.searchsorted(self.shard_ends, upcoming, side="right").tolist()
                nxt = set(per_next)
                self.active_shards = set(shards)
                if self.cache_limit is not None:
                    publish = (
                        demand and later and (published is None or done - published >= _DEMAND_SAMPLES // 4)
                    )
                    if planned is None or publish or done - planned >= _PLAN_EVERY:
                        self._spans = plan_spans(self.shard_ends, [current, *window])
                        planned = done if later else None  # the first chunk's look is shallow: look again
                    self._read_since_plan = 0 if planned is None else done - planned
                    if publish:  # the board (of the deep window) every quarter window
                        self.shard_cache().publish_demand(self._spans, done)
                        published = done
                    elif demand and later:  # moved along by the progress in between
                        self.shard_cache().demand_progress(done)
                    # keep this chunk's and the next one's shards, and those read again soon (_KEEP_AHEAD)
                    if self._crowded:
                        self._crowded, keep_soon_from = False, done + _DEMAND_SAMPLES
                    soon = self._used_soon() if done >= keep_soon_from else set()
                    self.release(self.active_shards | nxt | soon)
                if pool is None:  # local raw shards: a cheap check each
                    for shard in shards:
                        if shard not in self.prepared:
                            self.prepare(shard, reader=True)
                    for i in current.tolist():
                        yield read(i)
                else:
                    # The pool's threads start on the first submit and, once running, compete with this
                    # thread for the CPU and the GIL (measured: +70 ms on a zstd first sample): the first
                    # chunk prepares only its first sample's shard (read while it is written) before that
                    # sample is yielded, then submits the rest; later chunks submit at once.
                    ahead = [*shards[1:], *sorted(nxt)]
                    if not started and self.direct_samples > 0:
                        reads = DirectReads(threads=_DIRECT_THREADS)
                        direct = self._read_directly(reads, current, per_sample)
                        # no early read of the first sample: every shard prepares in the background
                        if direct:
                            started = True
                            ahead = [*shards, *sorted(nxt)]
                    if started:
                        self._prepare_ahead(pool, pending, ahead)
                    for pos, (i, shard) in enumerate(zip(current.tolist(), per_sample.tolist())):
                        got = direct.pop(pos, None)
                        early = None if started else self._early_sample(pool, pending, shard, i)
                        if got is not None:
                            early = self._decode_direct(shard, got.result())
                        if early is not None:
                            yield SampleRef(None, -1, early) if refs else early
                        else:
                            if shard not in self.prepared:
                                self._await_prepared(shard, pending)
                            yield read(i)
                        if not started:
                            started = True
                            self._prepare_ahead(pool, pending, ahead)
                later = True
                done += len(current)
                current = window.popleft() if window else None
                ahead_samples -= 0 if current is None else len(current)
        finally:
            if demand and self.cache is not None:
                self.cache.withdraw_demand()
            if reads is not None:
                reads.close()
            if pool is not None:
                # cancel first, then wait: shutdown(cancel_futures=True) fails at interpreter exit
                for fut in pending.values():
                    fut.cancel()
                pool.shutdown(wait=True)

    def _read_directly(
        self, reads: DirectReads, chunk: np.ndarray, per_sample: np.ndarray
    ) -> dict[int, Future[bytes | None]]:
        """Start reading the chunk's first ``direct_samples`` samples straight from their remote shards where
        that applies (``streaming.reader.direct_read``): position in the chunk -> a future of the bytes."""
        out: dict[int, Future[bytes | None]] = {}
        start_of = np.concatenate([[0], self.shard_ends[:-1]])
        for pos, (i, shard) in enumerate(zip(chunk[: self.direct_samples].tolist(), per_sample.tolist())):
            read = self._remote_reader(shard)
            if read is not None:
                out[pos] = reads.sample(shard, self.shards[shard], i - int(start_of[shard]), read)
        return out

    def _remote_reader(self, shard: int) -> ReadBytes | None:
        """Range reads of ``shard``'s remote raw file, or None where direct reads do not apply."""
        info = self.shards[shard]
        stream = self.streams[int(self.stream_per_shard[shard])]
        if (
            not stream.is_remote
            or stream.remote_dirname is None
            or shard in self.prepared
            or info.format != "mds"
            or info.zip_data is not None
            or self._checks_hash(shard)
            or os.path.exists(os.path.join(stream.dirname, info.raw_data.basename))
        ):
            return None
        url = join_url(stream.remote_dirname, info.raw_data.basename)
        backend = get_backend(url)
        if not backend.ranged_reads:
            return None
        timeout = stream.retry_policy().timeout
        quick = backend.quick_reader(url, timeout=timeout)
        if quick is not None:
            return quick

        def read(start: int, end: int) -> bytes | None:
            try:
                got = backend.read_range(url, start, end, timeout=timeout)
            except Exception:  # any failure: the sample is read from its downloaded shard instead
                return None
            return got[0] if got is not None and len(got[0]) == end - start else None

        return read

    def _decode_direct(self, shard: int, raw: bytes | None) -> dict[str, Any] | None:
        """A directly read sample, decoded; None (read it from the prepared shard) if it could not be."""
        if raw is None:
            return None
        info = self.shards[shard]
        stream = self.streams[int(self.stream_per_shard[shard])]
        check_shard_safe(
            info,
            path=os.path.join(stream.dirname, info.raw_data.basename),
            allow_unsafe_types=self.allow_unsafe_types,
        )
        try:
            return MDSSchema.from_config(info.config).decoder()(memoryview(raw))
        except ShardFormatError:
            return None

    def _early_sample(
        self, pool: ThreadPoolExecutor, pending: dict[int, Future[None]], shard: int, sample_id: int
    ) -> dict[str, Any] | None:
        """Sample ``sample_id`` of the unprepared ``shard``, read while a pool thread prepares the shard (its
        raw file read as it is written: ``streaming.reader.growing_shard``); None where that does not apply or
        does not work out (the caller then waits for the preparation, which stays in ``pending``)."""
        info = self.shards[shard]
        stream = self.streams[int(self.stream_per_shard[shard])]
        if (
            shard in self.prepared
            or info.format != "mds"
            or self._checks_hash(shard)
            or os.path.exists(os.path.join(stream.dirname, info.raw_data.basename))
        ):
            return None
        check_shard_safe(
            info,
            path=os.path.join(stream.dirname, info.raw_data.basename),
            allow_unsafe_types=self.allow_unsafe_types,
        )
        growing = GrowingFile()
        start = int(self.shard_ends[shard - 1]) if shard else 0
        # held from before the preparation until the read closes the file: an eviction in between would leave
        # bytes on disk (this open file) that no one counts against cache_limit
        held: AbstractContextManager[None] = (
            self.shard_cache().held_while_prepared(shard)
            if stream.is_remote and self.cache_limit is not None
            else nullcontext()
        )
        with held:
            fut = pool.submit(self.prepare, shard, prefetch=True, on_tmp=growing.announce)
            pending[shard] = fut
            raw = early_sample_bytes(growing, info, sample_id - start, fut)
        if raw is None:
            return None
        try:
            return MDSSchema.from_config(info.config).decoder()(memoryview(raw))
        except ShardFormatError:
            return None  # the reader of the prepared file raises it, naming the file and sample

    def _pool(self) -> ThreadPoolExecutor | None:
        """A thread pool preparing shards ahead of use: for remote streams (downloads) and compressed shards
        (decompression); None when every shard is a local raw file (nothing to overlap)."""
        if not any(s.is_remote for s in self.streams) and not self.any_compressed():
            return None
        if any(s.is_remote or s.validate_hash != HASH_OFF for s in self.streams):
            self.shard_cache()  # built here, once, not raced by the pool's threads
        return ThreadPoolExecutor(max_workers=self.download_concurrency)

    def _prepare_ahead(
        self, pool: ThreadPoolExecutor, pending: dict[int, Future[None]], ahead: list[int]
    ) -> None:
        """Prepare ``ahead`` (the chunk's shards after its first sample's, in order of first use, then the
        next chunk's) in the background; the first sample's shard is prepared inline when it is read, so it
        waits only for its own shard."""
        # surface prefetch errors; prepared again below if needed
        for shard, fut in list(pending.items()):
            if fut.done():
                fut.exception()
                del pending[shard]
        for shard in ahead:
            if shard not in self.prepared and shard not in pending and not self._cached(shard):
                pending[shard] = pool.submit(self._prefetch, shard)

    def _cached(self, shard_id: int) -> bool:
        """Whether a remote shard is ready in the cache as it is (a look at the disk, no pool task): with a
        ``cache_limit`` a reader forgets the shards it released (``release``), and its next chunks ask for
        them again while they are mostly still cached (measured: 3.3 opens a shard per epoch at 250 samples a
        shard, a prefetch task each). Not pinned: one evicted before it is read is fetched by its reader."""
        if self.cache is None or self.cache_limit is None:
            return False
        stream = self.streams[int(self.stream_per_shard[shard_id])]
        return bool(stream.is_remote) and self.cache.ready(shard_id)

    def _await_prepared(self, shard: int, pending: dict[int, Future[None]]) -> None:
        """Wait for ``shard``'s background preparation; a prefetch that gave up or failed is redone when the
        shard is opened (``reader``, which raises the error with its context)."""
        fut = pending.pop(shard, None)
        if fut is not None:
            fut.exception()

    def _prefetch(self, shard_id: int) -> None:
        self.prepare(shard_id, prefetch=True)
