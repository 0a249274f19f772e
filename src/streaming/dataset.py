"""``StreamingDataset``: mixed streams, elastic deterministic order, mid-epoch resumption, many processes.

Design tradeoff: no cross-process state at all. Upstream coordinates the processes of a node through named
shared memory and lock files (plan hand-off, epoch counter, resume blob), which collide between jobs and go
stale after a crash. Here every process (rank or DataLoader worker) derives what it needs from pure functions
of (dataset indexes, arguments, world, epoch, resume offset): ``streaming.plan`` computes only this worker's
slice of the epoch, lazily. So two jobs or users can read one directory at once, a ``kill -9`` leaves nothing
behind, and no clean-up function exists. The price: the epoch counter lives in the rank process, so with
DataLoader workers use ``StreamingDataLoader`` (or ``set_epoch``), which advances it.

Shards are prepared (``prepare_shard``) ahead of use: a remote stream's are downloaded once per node through
``streaming.cache.ShardCache``; a local stream's are checked and decompressed atomically by
``Stream.prepare_shard``. When there is work to overlap (remote or compressed shards), only the shard of a
chunk's first sample is prepared inline; the chunk's other shards (in order of first use) and the next chunk's
are prepared in a thread pool, so ahead-of-use work is bounded by ``predownload`` and the first sample never
waits for shards it does not need.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from streaming.cache import CachedShard, ShardCache
from streaming.format.index import ShardInfo
from streaming.format.reader import ShardReader, check_shard_safe, open_shard
from streaming.plan import BATCHING_METHODS, SHUFFLE_ALGOS, GlobalOrder, PlanSpec, WorkerPlan, epoch_order
from streaming.plan.partition import DeviceSlice, check_partition
from streaming.plan.sampling import stream_choose
from streaming.sizes import parse_bytes, parse_count
from streaming.stream import Stream
from streaming.world import World

__all__ = ["STATE_VERSION", "StreamingDataset"]

STATE_VERSION = 1
_CHECKED_KEYS = (
    "shuffle",
    "shuffle_algo",
    "shuffle_seed",
    "shuffle_block_size",
    "partition_algo",
    "batching_method",
    "sampling_method",
    "sampling_granularity",
    "epoch_size",
    "streams_fingerprint",
)


class StreamingDataset(IterableDataset):
    """An iterable (and randomly accessible) dataset over one or more streams of shards.

    Args:
        streams: Streams to mix; or give ``remote`` / ``local`` for a single one.
        remote: Remote of the single stream.
        local: Local directory of the single stream.
        split: Default split of every stream.
        download_retry: Default per-stream download retries.
        download_timeout: Default per-stream download timeout (s).
        validate_hash: Default per-stream hash check.
        keep_zip: Default per-stream keep-compressed flag.
        epoch_size: Samples per epoch (int or ``"100k"``-style string); relative weights only.
        predownload: Samples a worker may prepare ahead (default ``8 * batch_size``, or 64).
        download_concurrency: Shard downloads each worker runs ahead at once (remote streams).
        cache_limit: Local cache budget (bytes or ``"10gb"``); checked against the largest shard.
        sampling_method: ``balanced`` (partial repeats change per epoch) or ``fixed``.
        sampling_granularity: Pick size for spreading a stream's partial repeat over shards.
        partition_algo: ``relaxed`` (any world) or ``orig`` (canonical and physical nodes divide each other).
        num_canonical_nodes: C (default: physical nodes, or 64x for ``py1s``/``py2s``).
        batch_size: Per-device batch size; needed to iterate; must equal the DataLoader's.
        shuffle: Shuffle samples.
        shuffle_algo: ``naive``, ``py1s``, ``py2s``, ``py1br`` or ``py1e``.
        shuffle_seed: Seed (>= 0).
        shuffle_block_size: Block size of ``py1br``/``py1e`` (default ``max(4_000_000 // C, 262144)``).
        batching_method: ``random``, ``stratified`` or ``per_stream``.
        allow_unsafe_types: Allow ``pkl`` columns.
        replication: Consecutive ranks that get identical samples.
        world: This rank's place in the training world, from the caller that owns the process group (a
            training task builds it once and passes it down); None detects it (``World.detect``: the process
            group, else ``RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE``), for standalone use.
    """

    def __init__(
        self,
        *,
        streams: Sequence[Stream] | None = None,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        download_retry: int = 2,
        download_timeout: float = 60.0,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        download_concurrency: int = 4,
        cache_limit: int | str | None = None,
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        world: World | None = None,
    ) -> None:
        if streams is not None and (remote is not None or local is not None):
            raise ValueError("pass either streams or remote/local, not both")
        if streams is None:
            if remote is None and local is None:
                raise ValueError("StreamingDataset needs streams, or remote and/or local")
            streams = [Stream(remote=remote, local=local)]
        if not streams:
            raise ValueError("streams must not be empty")
        choices = {
            "sampling_method": (sampling_method, ("balanced", "fixed")),
            "partition_algo": (partition_algo, ("orig", "relaxed")),
            "shuffle_algo": (shuffle_algo, SHUFFLE_ALGOS),
            "batching_method": (batching_method, BATCHING_METHODS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        for name, number, low in (
            ("shuffle_seed", shuffle_seed, 0),
            ("sampling_granularity", sampling_granularity, 1),
            ("batch_size", batch_size, 1),
            ("num_canonical_nodes", num_canonical_nodes, 1),
            ("shuffle_block_size", shuffle_block_size, 1),
            ("replication", replication, 1),
            ("predownload", predownload, 0),
        ):
            if number is not None and number < low:
                raise ValueError(f"{name} must be >= {low}, got {number}")
        if world is not None and (world.workers_per_rank, world.worker) != (1, 0):
            raise ValueError("pass the rank's world (one worker); DataLoader workers are derived from it")
        self.streams = list(streams)
        for s in self.streams:
            s.apply_defaults(
                split=split,
                download_retry=download_retry,
                download_timeout=download_timeout,
                validate_hash=validate_hash,
                keep_zip=keep_zip,
            )
        self.sampling_method = sampling_method
        self.sampling_granularity = sampling_granularity
        self.partition_algo = partition_algo
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.shuffle_algo = shuffle_algo
        self.shuffle_seed = shuffle_seed
        self.shuffle_block_size = shuffle_block_size
        self.batching_method = batching_method
        self.allow_unsafe_types = allow_unsafe_types
        self.replication = replication
        self.predownload = predownload if predownload is not None else (8 * batch_size if batch_size else 64)
        if download_concurrency < 1:
            raise ValueError(f"download_concurrency must be >= 1, got {download_concurrency}")
        self.download_concurrency = download_concurrency
        self._load_indexes()
        self.epoch_size_arg = None if epoch_size is None else parse_count(epoch_size, name="epoch_size")
        self.choose_per_stream = stream_choose(
            samples_per_stream=self.samples_per_stream.tolist(),
            proportion=[s.proportion for s in self.streams],
            repeat=[s.repeat for s in self.streams],
            choose=[s.choose for s in self.streams],
            epoch_size=self.epoch_size_arg,
            seed=shuffle_seed,
        )
        self.epoch_size = int(self.choose_per_stream.sum())
        self.cache_limit = None if cache_limit is None else parse_bytes(cache_limit, name="cache_limit")
        if self.cache_limit is not None:
            largest = max((sum(f.bytes for f in sh.files()) for sh in self.shards), default=0)
            if self.cache_limit < 4 * largest:
                raise ValueError(
                    f"cache_limit={self.cache_limit} bytes is below 4x the largest shard ({largest} bytes); raise "
                    "it or write smaller shards"
                )
        self._ncn_arg = num_canonical_nodes
        self._ncn_state: int | None = None
        self._initial_nodes: int | None = None
        if world is not None and replication is not None:
            world = replace(world, replication=replication)
        self._world: World | None = world
        self._epoch, self._drop = 0, 0
        self._iter_epoch: int | None = None
        self._iter_drop = 0
        self._expected_gbs: int | None = None
        self._reset_process_caches()

    # ----- indexes and random access -----

    def _load_indexes(self) -> None:
        self.shards: list[ShardInfo] = []
        stream_per_shard, per_stream = [], []
        for i, s in enumerate(self.streams):
            shards = s.index().shards
            self.shards.extend(shards)
            stream_per_shard.extend([i] * len(shards))
            per_stream.append(len(shards))
        self.num_shards = len(self.shards)
        self.samples_per_shard = np.array([sh.samples for sh in self.shards], dtype=np.int64)
        self.stream_per_shard = np.array(stream_per_shard, dtype=np.int64)
        self.shards_per_stream = np.array(per_stream, dtype=np.int64)
        self.shard_offset_per_stream = np.concatenate([[0], np.cumsum(self.shards_per_stream)[:-1]]).astype(
            np.int64
        )
        self.samples_per_stream = np.array(
            [int(self.samples_per_shard[self.stream_per_shard == i].sum()) for i in range(len(self.streams))],
            dtype=np.int64,
        )
        self.sample_offset_per_stream = np.concatenate([[0], np.cumsum(self.samples_per_stream)[:-1]]).astype(
            np.int64
        )
        self._shard_ends = np.cumsum(self.samples_per_shard).tolist()
        self.size = int(self.samples_per_shard.sum())
        if not self.allow_unsafe_types:
            for sh, si in zip(self.shards, stream_per_shard):
                where = f"{self.streams[si].dirname}: shard {sh.raw_data.basename}"
                check_shard_safe(sh, path=where, allow_unsafe_types=False)

    def _reset_process_caches(self) -> None:
        self._readers: dict[int, ShardReader] = {}
        self._prepared: set[int] = set()
        self._cache: ShardCache | None = None
        self._active_shards: set[int] = set()
        self._upcoming_shards: set[int] = set()
        self._orders: dict[tuple[int, int | None], GlobalOrder] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_readers", "_prepared", "_orders", "_cache", "_active_shards", "_upcoming_shards"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_caches()

    def _shard_cache(self) -> ShardCache:
        """The node-level cache over every shard (built lazily, per process)."""
        if self._cache is None:
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
                    )
                )
            self._cache = ShardCache(shards=shards, cache_limit=self.cache_limit)
        return self._cache

    def prepare_shard(self, shard_id: int) -> None:
        """Make shard ``shard_id`` readable locally: download (remote streams, once per node), verify, decompress."""
        self._prepare(shard_id)

    def _prepare(self, shard_id: int, *, reader: bool = False, prefetch: bool = False) -> None:
        """``prepare_shard``. When the cache is full of shards in use, the iterating thread (``reader``) first
        drops its own idle readers, and a ``prefetch`` gives up at once (the shard is prepared when needed)."""
        stream = self.streams[int(self.stream_per_shard[shard_id])]
        if stream.is_remote:
            active, upcoming = self._active_shards, self._upcoming_shards
            # Eviction order for this worker's view of the plan: shards of the chunk being read are needed
            # now, those of the next chunk soon; the rest go first (least recently used first).
            if not self._shard_cache().prepare(
                shard_id,
                next_use=lambda k: 0.0 if k in active else 1.0 if k in upcoming else float("inf"),
                on_full=(lambda: self._release_shards(set())) if reader else None,
                wait=not prefetch,
            ):
                return
        else:
            stream.prepare_shard(self.shards[shard_id])
            if stream.validate_hash:
                self._shard_cache().verify(shard_id)
        self._prepared.add(shard_id)

    def _release_shards(self, keep: set[int]) -> None:
        """Forget readers (and cache pins) of shards outside ``keep`` so their files can be evicted."""
        for shard_id in [k for k in self._readers if k not in keep]:
            del self._readers[shard_id]
            self._prepared.discard(shard_id)
            if self._cache is not None:
                self._cache.unpin(shard_id)

    def _reader(self, shard_id: int) -> ShardReader:
        reader = self._readers.get(shard_id)
        if reader is None:
            stream = self.streams[int(self.stream_per_shard[shard_id])]
            pin = stream.is_remote and self.cache_limit is not None  # in use: not evictable until released
            for attempt in range(3):
                if shard_id not in self._prepared:
                    self._prepare(shard_id, reader=True)
                try:
                    if pin and not self._shard_cache().pin(shard_id):
                        raise FileNotFoundError(
                            f"shard {self.shards[shard_id].raw_data.basename} was evicted"
                        )
                    reader = open_shard(
                        stream.dirname, self.shards[shard_id], allow_unsafe_types=self.allow_unsafe_types
                    )
                    break
                except FileNotFoundError:  # evicted by another process between prepare and open
                    self._prepared.discard(shard_id)
                    if pin:
                        self._shard_cache().unpin(shard_id)
                    if attempt == 2 or not stream.is_remote:
                        raise
            self._readers[shard_id] = reader  # type: ignore[assignment]
        return reader  # type: ignore[return-value]

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """Sample ``sample_id`` of the unresampled concatenation of all streams (negative counts from the end)."""
        if sample_id < 0:
            sample_id += self.size
        if not 0 <= sample_id < self.size:
            raise IndexError(f"sample index {sample_id} out of range for a dataset of {self.size} samples")
        shard = bisect.bisect_right(self._shard_ends, sample_id)
        return self._reader(shard)[sample_id - (self._shard_ends[shard - 1] if shard else 0)]

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Any:
        if isinstance(index, int | np.integer):
            return self.get_item(int(index))
        if isinstance(index, slice):
            return [self.get_item(i) for i in range(*index.indices(self.size))]
        if isinstance(index, np.ndarray | list | tuple):
            return [self.get_item(int(i)) for i in np.asarray(index).reshape(-1)]
        raise TypeError(f"index must be an int, slice, list or numpy array, got {type(index).__name__}")

    # ----- world, plan, epochs -----

    def _rank_world(self) -> World:
        if self._world is None:
            self._world = World.detect(
                replication=self.replication, use_process_group=get_worker_info() is None
            )
        return self._world

    @property
    def num_canonical_nodes(self) -> int:
        """C: from the loaded state, the argument, or the default for this world."""
        if self._ncn_state is not None:
            return self._ncn_state
        if self._ncn_arg is not None:
            return self._ncn_arg
        nodes = self._initial_nodes or self._rank_world().num_nodes
        return 64 * nodes if self.shuffle_algo in ("py1s", "py2s") else nodes

    def _spec(self) -> PlanSpec:
        world = self._rank_world()
        return PlanSpec(
            shard_sizes=tuple(self.samples_per_shard.tolist()),
            shards_per_stream=tuple(self.shards_per_stream.tolist()),
            choose_per_stream=tuple(self.choose_per_stream.tolist()),
            num_canonical_nodes=self.num_canonical_nodes,
            global_batch_size=self.batch_size * world.num_devices if self.batch_size else None,
            shuffle=self.shuffle,
            shuffle_algo=self.shuffle_algo,
            shuffle_seed=self.shuffle_seed,
            shuffle_block_size=self.shuffle_block_size,
            sampling_method=self.sampling_method,
            sampling_granularity=self.sampling_granularity,
            batching_method=self.batching_method,
        )

    def _order(self, epoch: int) -> GlobalOrder:
        key = (epoch, self.num_canonical_nodes)
        order = self._orders.get(key)
        if order is None:
            self._orders.clear()
            order = self._orders[key] = epoch_order(self._spec(), epoch)
        return order

    def _next(self) -> tuple[int, int]:
        """The (epoch, offset) the next iteration starts at (a finished epoch rolls over)."""
        epoch, drop = self._epoch, self._drop
        if drop and drop >= len(self._order(epoch)):
            epoch, drop = epoch + 1, 0
        return epoch, drop

    def _begin_epoch(self) -> tuple[int, int]:
        epoch, drop = self._next()
        self._iter_epoch, self._iter_drop = epoch, drop
        self._epoch, self._drop = epoch + 1, 0
        return epoch, drop

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start (for plain DataLoaders with workers)."""
        self._epoch, self._drop = int(epoch), 0

    def _device_slice(self, drop: int, epoch: int) -> DeviceSlice:
        world = self._rank_world()
        total = max(0, len(self._order(epoch)) - drop)
        return DeviceSlice(total=total, num_devices=world.num_devices, device=world.device)

    def __len__(self) -> int:
        """Samples this rank yields in the next iteration (exact, padding included)."""
        epoch, drop = self._next()
        return self._device_slice(drop, epoch).num_samples

    def _check_iterable(self) -> World:
        if self.batch_size is None:
            raise ValueError(
                "Please pass `batch_size` to StreamingDataset to iterate (the per-device batch size, equal to the "
                "DataLoader's batch_size); random access works without it"
            )
        world = self._rank_world()
        check_partition(
            partition_algo=self.partition_algo,
            num_canonical_nodes=self.num_canonical_nodes,
            num_physical_nodes=world.num_nodes,
        )
        if self._initial_nodes is None:
            self._initial_nodes = world.num_nodes
        gbs = self.batch_size * world.num_devices
        if self._expected_gbs is not None and gbs != self._expected_gbs:
            raise ValueError(
                f"the loaded state was saved with global batch size {self._expected_gbs}, but this run has "
                f"{gbs} (batch_size={self.batch_size} x {world.num_devices} devices); keep the global batch size "
                "fixed to resume (change batch_size accordingly)"
            )
        return world

    def __iter__(self) -> Iterator[dict[str, Any]]:
        world = self._check_iterable()
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        epoch, drop = self._begin_epoch()
        plan = WorkerPlan(
            order=self._order(epoch),
            drop_first=drop,
            num_devices=world.num_devices,
            device=world.device,
            batch_size=self.batch_size,  # type: ignore[arg-type]
            num_workers=workers,
            worker=worker,
        )
        return self._iter_plan(plan)

    def _warm_plan(self, num_workers: int) -> None:
        """Compute (in the rank process) the shuffle blocks behind each worker's first batch, so forked workers
        inherit them instead of all computing the same window at once on a busy CPU."""
        world = self._check_iterable()
        epoch, drop = self._next()
        order = self._order(epoch)
        for worker in range(num_workers):
            plan = WorkerPlan(
                order=order,
                drop_first=drop,
                num_devices=world.num_devices,
                device=world.device,
                batch_size=self.batch_size,  # type: ignore[arg-type]
                num_workers=num_workers,
                worker=worker,
            )
            next(plan.batches(), None)

    def _drop_plan_caches(self) -> None:
        self._orders.clear()

    def _iter_plan(self, plan: WorkerPlan) -> Iterator[dict[str, Any]]:
        pool = self._prepare_pool()
        pending: dict[int, Future[None]] = {}
        try:
            chunks = plan.batches(chunk=max(self.predownload, 1))
            current = next(chunks, None)
            while current is not None:
                upcoming = next(chunks, None)
                per_sample = np.searchsorted(self._shard_ends, current, side="right")
                shards = list(dict.fromkeys(per_sample.tolist()))  # in order of first use
                nxt: set[int] = set()
                if upcoming is not None:
                    nxt = set(np.searchsorted(self._shard_ends, upcoming, side="right").tolist())
                self._active_shards, self._upcoming_shards = set(shards), nxt
                if self.cache_limit is not None:
                    self._release_shards(self._active_shards)
                if pool is None:  # local raw shards: a cheap check each
                    for shard in shards:
                        if shard not in self._prepared:
                            self._prepare(shard, reader=True)
                    for i in current.tolist():
                        yield self[i]
                else:
                    self._prepare_ahead(pool, pending, shards, sorted(nxt))
                    for i, shard in zip(current.tolist(), per_sample.tolist()):
                        if shard not in self._prepared:
                            self._await_prepared(shard, pending)
                        yield self[i]
                current = upcoming
        finally:
            if pool is not None:
                # cancel first, then wait: shutdown(cancel_futures=True) fails at interpreter exit
                for fut in pending.values():
                    fut.cancel()
                pool.shutdown(wait=True)

    def _prepare_pool(self) -> ThreadPoolExecutor | None:
        """A thread pool preparing shards ahead of use: for remote streams (downloads) and compressed shards
        (decompression); None when every shard is a local raw file (nothing to overlap)."""
        if not any(s.is_remote for s in self.streams) and all(sh.zip_data is None for sh in self.shards):
            return None
        if any(s.is_remote or s.validate_hash for s in self.streams):
            self._shard_cache()  # built here, once, not raced by the pool's threads
        return ThreadPoolExecutor(max_workers=self.download_concurrency)

    def _prepare_ahead(
        self, pool: ThreadPoolExecutor, pending: dict[int, Future[None]], now: list[int], soon: list[int]
    ) -> None:
        """Prepare the shard of the chunk's first sample inline, then the rest of this chunk (in order of first
        use) and the next chunk's shards in the background: the first sample waits only for its own shard."""
        for shard, fut in list(pending.items()):  # surface prefetch errors; prepared again below if needed
            if fut.done():
                fut.exception()
                del pending[shard]
        if now and now[0] not in self._prepared and now[0] not in pending:
            self._prepare(now[0], reader=True)
        for shard in [*now[1:], *soon]:
            if shard not in self._prepared and shard not in pending:
                pending[shard] = pool.submit(self._prefetch, shard)

    def _await_prepared(self, shard: int, pending: dict[int, Future[None]]) -> None:
        """Wait for ``shard``'s background preparation; a prefetch that gave up or failed is redone inline (by
        the reader, which raises the error with its context)."""
        fut = pending.pop(shard, None)
        if fut is not None:
            fut.exception()
        if shard not in self._prepared:
            self._prepare(shard, reader=True)

    def _prefetch(self, shard_id: int) -> None:
        self._prepare(shard_id, prefetch=True)

    # ----- resumption -----

    def _config(self) -> dict[str, Any]:
        blob = json.dumps(
            [s.fingerprint() for s in self.streams] + [self.choose_per_stream.tolist()], sort_keys=True
        )
        return {
            "shuffle": self.shuffle,
            "shuffle_algo": self.shuffle_algo,
            "shuffle_seed": self.shuffle_seed,
            "shuffle_block_size": self._spec().block_size,
            "partition_algo": self.partition_algo,
            "batching_method": self.batching_method,
            "sampling_method": self.sampling_method,
            "sampling_granularity": self.sampling_granularity,
            "epoch_size": self.epoch_size,
            "streams_fingerprint": hashlib.sha256(blob.encode()).hexdigest()[:16],
        }

    def state_dict(self, num_samples: int, from_beginning: bool = False) -> dict[str, Any]:
        """A versioned, self-describing resume state.

        Args:
            num_samples: Global samples consumed (all devices) in the current epoch.
            from_beginning: Count ``num_samples`` from the epoch start rather than from the resumed offset.

        Returns:
            The state (JSON-serializable).
        """
        if self._iter_epoch is None:
            epoch, base = self._next()
        else:
            epoch, base = self._iter_epoch, self._iter_drop
        world = self._rank_world()
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "sample_in_epoch": int(num_samples) if from_beginning else base + int(num_samples),
            "global_batch_size": self.batch_size * world.num_devices if self.batch_size else None,
            "num_canonical_nodes": self.num_canonical_nodes,
            "initial_physical_nodes": self._initial_nodes or world.num_nodes,
            **self._config(),
        }

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume from ``state_dict()`` output: the next iteration continues exactly where it stopped.

        Raises:
            ValueError: the state is not from this library/version, or does not match this dataset.
        """
        if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
            got = obj.get("version") if isinstance(obj, dict) else type(obj).__name__
            raise ValueError(f"not a StreamingDataset state of version {STATE_VERSION} (got version {got!r})")
        ncn = obj.get("num_canonical_nodes")
        diffs = []
        if self._ncn_arg is not None and ncn != self._ncn_arg:
            diffs.append(f"num_canonical_nodes: state has {ncn!r}, dataset has {self._ncn_arg!r}")
        if not isinstance(ncn, int) or ncn < 1:
            diffs.append(f"num_canonical_nodes: state has {ncn!r}, expected an int >= 1")
        previous = self._ncn_state
        if not diffs:
            self._ncn_state = ncn  # the default block size depends on it
            mine = self._config()
            diffs = [
                f"{k}: state has {obj.get(k)!r}, dataset has {mine[k]!r}"
                for k in _CHECKED_KEYS
                if obj.get(k) != mine[k]
            ]
        if diffs:
            self._ncn_state = previous
            raise ValueError("the resume state does not match this dataset: " + "; ".join(diffs))
        self._initial_nodes = obj.get("initial_physical_nodes")
        self._expected_gbs = obj.get("global_batch_size")
        self._epoch, self._drop = int(obj["epoch"]), int(obj["sample_in_epoch"])
        self._iter_epoch = None
