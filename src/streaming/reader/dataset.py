"""``StreamingDataset``: mixed streams, elastic deterministic order, mid-epoch resumption, many processes.

Design tradeoff: no cross-process state at all. Upstream coordinates the processes of a node through named
shared memory and lock files (plan hand-off, epoch counter, resume blob), which collide between jobs and go
stale after a crash. Here every process (rank or DataLoader worker) derives what it needs from pure functions
of (dataset indexes, arguments, world, epoch, resume offset): ``streaming.plan`` computes only this worker's
slice of the epoch, lazily. So two jobs or users can read one directory at once, a ``kill -9`` leaves nothing
behind, and no clean-up function exists. The price: the epoch counter lives in the rank process, so with
DataLoader workers use ``StreamingDataLoader`` (or ``set_epoch``), which advances it.

Parts: ``dataset_args`` (argument checks), ``dataset_index`` (the streams' shards as arrays),
``shard_access`` (per-process readers and shard preparation ahead of use, bounded by ``predownload``),
``epoch_planner`` (world, epoch orders, the epoch counter), ``resume_state`` (the state dict and its checks,
pure functions).
"""

from __future__ import annotations

import bisect
import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from streaming.cache import ShardCache
from streaming.format.hashing import check_validate_hash
from streaming.format.index import ShardInfo
from streaming.plan.sampling import derived_weights, stream_choose
from streaming.plan.upstream_shuffle import UPSTREAM_ALGOS
from streaming.reader.dataset_args import (
    check_cache_limit,
    check_choices_and_bounds,
    resolve_streams,
    warn_on_settings,
)
from streaming.reader.dataset_index import load_dataset_shards
from streaming.reader.epoch_planner import EpochPlanner
from streaming.reader.resume_state import (
    STATE_VERSION,
    UPSTREAM_ORDER,
    build_state,
    check_state_version,
    check_upstream_state,
    dataset_config,
    from_upstream,
    is_upstream_state,
    resume_mismatches,
    stream_summary,
    streams_fingerprint,
)
from streaming.reader.shard_access import ShardAccess
from streaming.reader.stream import Stream
from streaming.reader.world import World
from streaming.storage.backends import get_backend
from streaming.storage.url import redact
from streaming.util.sizes import parse_bytes, parse_count

__all__ = ["STATE_VERSION", "StreamingDataset"]


def _where(stream: Stream) -> str:
    """A stream's name in resume states and their messages:
    its remote directory (redacted), else its local one."""
    return redact(stream.remote_dirname) if stream.remote_dirname else stream.dirname


class StreamingDataset(IterableDataset):
    """An iterable (and randomly accessible) dataset over one or more streams of shards.

    Args:
        streams: Streams to mix; or give ``remote`` / ``local`` for a single one.
        remote: Remote of the single stream.
        local: Local directory of the single stream.
        split: Default split of every stream.
        download_retry: Default per-stream cap on download retries
            (None: as many as ``download_budget`` allows).
        download_timeout: Default per-stream download timeout (s).
        download_budget: Default per-stream seconds a download keeps retrying transient failures (300).
        validate_hash: Default per-stream hash check: unset (the default) verifies every shard file whose
            index entry records digests, with the fastest of them, on download and on first use of a cached
            copy; an algorithm name verifies with that one (required in the index); ``False`` or ``"off"``
            skips checks.
        keep_zip: Default per-stream keep-compressed flag.
        epoch_size: Samples per epoch (int or ``"100k"``-style string); relative weights only.
        predownload: Samples a worker may prepare ahead (default ``8 * batch_size``, or 64).
        download_concurrency: Shard downloads each worker runs ahead at once (remote streams).
        direct_first_batch: Read the samples of an iteration's first batch straight from their remote shards
            (two rounds of small range requests) while the shards download, instead of waiting for them: a
            shuffled batch draws from most shards (``streaming.reader.direct_read``). Uncompressed MDS shards
            without hash checks, on stores with range reads; ~1-2% more bytes.
        cache_limit: Local cache budget (bytes or ``"10gb"``): the streams' index.json files count toward it;
            at least 4x the largest shard (all of its files).
        sampling_method: ``balanced`` (partial repeats change per epoch) or ``fixed``.
        sampling_granularity: Pick size for spreading a stream's partial repeat over shards.
        partition_algo: ``relaxed`` (any world) or ``orig`` (canonical and physical nodes divide each other).
        num_canonical_nodes: C (default: physical nodes, or 64x for ``py1s``/``py2s``).
        batch_size: Per-device batch size; needed to iterate; must equal the DataLoader's.
        shuffle: Shuffle samples.
        shuffle_algo: ``naive``, ``py1s``, ``py2s``, ``py1br`` or ``py1e``.
        shuffle_seed: Seed (>= 0).
        shuffle_block_size: Block size of ``py1br``/``py1e`` (default ``max(4_000_000 // C, 262144)``).
        batching_method: ``random``, ``stratified``, ``per_stream`` or ``device_per_stream``.
        allow_unsafe_types: Allow ``pkl`` columns.
        replication: Consecutive ranks that get identical samples.
        stream_tag: When set, every sample dict (iteration and random access) also holds
            ``{stream_tag: <index of its stream in streams>}`` (e.g. for per-stream metrics of a mixture).
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
        download_retry: int | None = None,
        download_timeout: float = 60.0,
        download_budget: float | None = None,
        validate_hash: str | bool | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        download_concurrency: int = 4,
        direct_first_batch: bool = True,
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
        stream_tag: str | None = None,
        world: World | None = None,
    ) -> None:
        self.streams = resolve_streams(streams, remote, local)
        check_choices_and_bounds(
            choices={
                "sampling_method": sampling_method,
                "partition_algo": partition_algo,
                "shuffle_algo": shuffle_algo,
                "batching_method": batching_method,
            },
            bounds={
                "shuffle_seed": (shuffle_seed, 0),
                "sampling_granularity": (sampling_granularity, 1),
                "batch_size": (batch_size, 1),
                "num_canonical_nodes": (num_canonical_nodes, 1),
                "shuffle_block_size": (shuffle_block_size, 1),
                "replication": (replication, 1),
                "predownload": (predownload, 0),
                "download_concurrency": (download_concurrency, 1),
            },
        )
        if world is not None and (world.workers_per_rank, world.worker) != (1, 0):
            raise ValueError("pass the rank's world (one worker); DataLoader workers are derived from it")
        for s in self.streams:
            s.apply_defaults(
                split=split,
                download_retry=download_retry,
                download_timeout=download_timeout,
                download_budget=download_budget,
                validate_hash=check_validate_hash(validate_hash),
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
        self.stream_tag = stream_tag
        self.predownload = predownload if predownload is not None else (8 * batch_size if batch_size else 64)
        self.download_concurrency = download_concurrency
        self.direct_first_batch = direct_first_batch
        self._load_indexes()
        warn_on_settings(
            batch_size=batch_size,
            predownload=predownload,
            shuffle=shuffle,
            shuffle_algo=shuffle_algo,
            shuffle_block_size=shuffle_block_size,
            largest_shard=int(self.samples_per_shard.max()),
        )
        self.epoch_size_arg = None if epoch_size is None else parse_count(epoch_size, name="epoch_size")
        self.choose_per_stream = stream_choose(
            samples_per_stream=self.samples_per_stream.tolist(),
            proportion=[s.weights_given["proportion"] for s in self.streams],
            repeat=[s.weights_given["repeat"] for s in self.streams],
            choose=[s.weights_given["choose"] for s in self.streams],
            epoch_size=self.epoch_size_arg,
            seed=shuffle_seed,
        )
        self.epoch_size = int(self.choose_per_stream.sum())
        proportions, repeats = derived_weights(
            samples_per_stream=self.samples_per_stream.tolist(),
            choose_per_stream=self.choose_per_stream.tolist(),
            proportion=[s.weights_given["proportion"] for s in self.streams],
            epoch_size=self.epoch_size_arg,
        )
        for s, p, r, c in zip(self.streams, proportions, repeats, self.choose_per_stream.tolist()):
            # as upstream fills them in
            s.proportion, s.repeat, s.choose = float(p), float(r), int(c)
        self.cache_limit = None if cache_limit is None else parse_bytes(cache_limit, name="cache_limit")
        check_cache_limit(self.cache_limit, self._bytes_per_shard, self._index_bytes())
        if world is not None and replication is not None:
            world = replace(world, replication=replication)
        self._plan = EpochPlanner(
            spec_args={
                "shard_sizes": tuple(self.samples_per_shard.tolist()),
                "shards_per_stream": tuple(self.shards_per_stream.tolist()),
                "choose_per_stream": tuple(self.choose_per_stream.tolist()),
                "shuffle": shuffle,
                "shuffle_algo": shuffle_algo,
                "shuffle_seed": shuffle_seed,
                "shuffle_block_size": shuffle_block_size,
                "sampling_method": sampling_method,
                "sampling_granularity": sampling_granularity,
                "batching_method": batching_method,
            },
            batch_size=batch_size,
            partition_algo=partition_algo,
            ncn_arg=num_canonical_nodes,
            replication=replication,
            world=world,
        )
        self._reset_process_caches()

    # ----- indexes and random access -----

    def _load_indexes(self) -> None:
        index = load_dataset_shards(self.streams, allow_unsafe_types=self.allow_unsafe_types)
        self.shards: Sequence[ShardInfo] = index.shards
        self.num_shards = index.num_shards
        self.samples_per_shard = index.samples_per_shard
        self.stream_per_shard = index.stream_per_shard
        self.shards_per_stream = index.shards_per_stream
        self.shard_offset_per_stream = index.shard_offset_per_stream
        self.samples_per_stream = index.samples_per_stream
        self.sample_offset_per_stream = np.concatenate([[0], np.cumsum(self.samples_per_stream)[:-1]]).astype(
            np.int64
        )
        self._shard_ends = index.shard_ends
        self._bytes_per_shard = index.bytes_per_shard
        self._any_compressed = index.any_compressed
        self.size = int(self.samples_per_shard.sum())
        self._stream_ends = np.cumsum(self.samples_per_stream).tolist()

    def _index_bytes(self) -> int:
        """Bytes of the streams' local index.json files (what upstream's minimum cache usage counts)."""
        paths = (os.path.join(s.dirname, "index.json") for s in self.streams)
        return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))

    def _shard_budget(self) -> int | None:
        """What ``cache_limit`` leaves for shard files: the index.json files count toward it (as upstream),
        but the shards always keep at least the 4x largest shard the limit was checked against."""
        if self.cache_limit is None:
            return None
        largest = int(self._bytes_per_shard.max()) if len(self._bytes_per_shard) else 0
        return max(self.cache_limit - self._index_bytes(), 4 * largest)

    def _reset_process_caches(self) -> None:
        self._access: ShardAccess | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_access", None)  # the planner drops its own order cache
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_caches()

    def _shards_access(self) -> ShardAccess:
        """This process's readers, shard preparation and prefetch pool (built lazily, never pickled)."""
        if self._access is None:
            self._access = ShardAccess(
                streams=self.streams,
                shards=self.shards,
                stream_per_shard=self.stream_per_shard,
                shard_ends=self._shard_ends,
                any_compressed=lambda: self._any_compressed,
                cache_limit=self._shard_budget(),
                allow_unsafe_types=self.allow_unsafe_types,
                download_concurrency=self.download_concurrency,
                direct_samples=(self.batch_size or 0) if self.direct_first_batch else 0,
            )
        return self._access

    def _shard_cache(self) -> ShardCache:
        """The node-level cache over every shard (built lazily, per process)."""
        return self._shards_access().shard_cache()

    def prepare_shard(self, shard_id: int) -> None:
        """Make shard ``shard_id`` readable locally: download (remote streams, once per node),
        verify, decompress."""
        self._shards_access().prepare(shard_id)

    @property
    def num_samples(self) -> int:
        """mosaicml-streaming's name for ``size``: samples in all streams, before any resampling."""
        return self.size

    def evict_shard(self, shard_id: int) -> None:
        """Delete shard ``shard_id``'s files from the local cache (it is downloaded again when needed). A
        shard being read or prepared (by any process) is left alone, and so is a shard whose only copy is
        local (mosaicml-streaming deletes it: its data would be gone)."""
        if not 0 <= shard_id < len(self.shards):
            raise IndexError(f"shard {shard_id} out of range: the dataset has {len(self.shards)} shards")
        if self.streams[int(self.stream_per_shard[shard_id])].is_remote:
            self._shards_access().forget(shard_id)
            self._shard_cache().evict(shard_id)

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """Sample ``sample_id`` of the unresampled concatenation of all streams
        (negative counts from the end)."""
        if sample_id < 0:
            sample_id += self.size
        if not 0 <= sample_id < self.size:
            raise IndexError(f"sample index {sample_id} out of range for a dataset of {self.size} samples")
        sample = self._shards_access().sample(sample_id)
        if self.stream_tag is not None:
            sample = {**sample, self.stream_tag: bisect.bisect_right(self._stream_ends, sample_id)}
        return sample

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Any:
        if isinstance(index, int | np.integer):
            return self.get_item(int(index))
        if isinstance(index, slice):
            return [self.get_item(i) for i in range(*index.indices(self.size))]
        if isinstance(index, np.ndarray | list | tuple):
            return [self.get_item(int(i)) for i in np.asarray(index).reshape(-1)]
        raise TypeError(f"index must be an int, slice, list or numpy array, got {type(index).__name__}")

    # ----- world, plan, epochs: ``EpochPlanner`` (the loader calls the underscored methods; see its docs)

    def _rank_world(self) -> World:
        return self._plan.rank_world()

    @property
    def num_canonical_nodes(self) -> int:
        """C: from the loaded state, the argument, or the default for this world."""
        return self._plan.num_canonical_nodes

    def _next(self) -> tuple[int, int]:
        return self._plan.next()

    def _begin_epoch(self) -> tuple[int, int]:
        return self._plan.begin_epoch()

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start (for plain DataLoaders with workers)."""
        self._plan.set_epoch(epoch)

    def __len__(self) -> int:
        """Samples this rank yields in the next iteration (exact, padding included)."""
        return self._plan.device_slice(*self._plan.next()).num_samples

    def _check_iterable(self) -> World:
        return self._plan.check_iterable()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        chunks = self._plan.iteration(chunk=max(self.predownload, 1))
        if self.stream_tag is None:
            return self._shards_access().iter_chunks(chunks)
        tag = self.stream_tag
        return ({**sample, tag: stream} for sample, stream in self._with_streams(chunks))

    def _iter_refs(self) -> Iterator[Any]:
        """``__iter__``'s samples as unread ``streaming.reader.batch_read.SampleRef`` s, with their stream
        index when samples are tagged: a DataLoader worker reads a batch of them at once
        (``streaming.loader.batch_groups``)."""
        chunks = self._plan.iteration(chunk=max(self.predownload, 1))
        if self.stream_tag is None:
            yield from self._shards_access().iter_chunks(chunks, refs=True)
            return
        for ref, stream in self._with_streams(chunks, refs=True):
            ref.stream = stream
            yield ref

    def _with_streams(self, chunks: Iterator[np.ndarray], *, refs: bool = False) -> Iterator[tuple[Any, int]]:
        """What ``ShardAccess.iter_chunks`` yields for ``chunks`` (samples, or refs when ``refs``), each with
        the index of its stream (items come in chunk order, so each chunk's stream indexes are queued as it is
        taken)."""
        ends = np.asarray(self._stream_ends, dtype=np.int64)
        streams: deque[int] = deque()

        def recorded() -> Iterator[np.ndarray]:
            for chunk in chunks:
                streams.extend(np.searchsorted(ends, chunk, side="right").tolist())
                yield chunk

        for item in self._shards_access().iter_chunks(recorded(), refs=refs):
            yield item, streams.popleft()

    def _warm_for_fork(self, num_workers: int) -> None:
        """Work forked DataLoader workers inherit instead of each doing it: the plan's first window, and the
        storage clients' shared models of each remote stream (``Backend.warm``)."""
        self._plan.warm(num_workers)
        for url in dict.fromkeys(s.remote_dirname for s in self.streams if s.is_remote and s.remote_dirname):
            get_backend(url).warm(url)

    def _drop_plan_caches(self) -> None:
        self._plan.orders.clear()

    # ----- resumption -----

    def _config(self, num_canonical_nodes: int | None = None) -> dict[str, Any]:
        """The checked part of a state (as it would be with ``num_canonical_nodes``, default: the current
        C)."""
        fingerprint = streams_fingerprint(
            [s.fingerprint() for s in self.streams], self.choose_per_stream.tolist()
        )
        return dataset_config(
            shuffle=self.shuffle,
            shuffle_algo=self.shuffle_algo,
            shuffle_seed=self.shuffle_seed,
            shuffle_block_size=self._plan.spec(num_canonical_nodes).block_size,
            partition_algo=self.partition_algo,
            batching_method=self.batching_method,
            sampling_method=self.sampling_method,
            sampling_granularity=self.sampling_granularity,
            epoch_size=self.epoch_size,
            fingerprint=fingerprint,
            upstream_order=bool(self._plan.spec_args.get("upstream_order")),
        )

    def state_dict(self, num_samples: int, from_beginning: bool = False) -> dict[str, Any]:
        """A versioned, self-describing resume state.

        Args:
            num_samples: Global samples consumed (all devices) in the current epoch.
            from_beginning: Count ``num_samples`` from the epoch start rather than from the resumed offset.

        Returns:
            The state (JSON-serializable).
        """
        epoch, base = self._plan.position()
        return build_state(
            epoch=epoch,
            sample_in_epoch=int(num_samples) if from_beginning else base + int(num_samples),
            global_batch_size=self._plan.global_batch_size(),
            num_canonical_nodes=self.num_canonical_nodes,
            initial_physical_nodes=self._plan.initial_nodes or self._rank_world().num_nodes,
            config=self._config(),
            streams=self._stream_summaries(),
        )

    def _follow_upstream_order(self, obj: dict[str, Any]) -> None:
        """Shuffle in mosaicml-streaming's own order from now on (a run that started on that library), so a
        state saved by it mid-epoch continues without repeating or skipping a sample.

        Raises:
            ValueError: A mid-epoch state of a shuffled run whose order cannot be reproduced here.
        """
        if not self.shuffle:
            return  # unshuffled orders are the same
        whole = bool(np.array_equal(self.choose_per_stream, self.samples_per_stream))
        if (
            self.shuffle_algo in UPSTREAM_ALGOS
            and self.batching_method in ("random", "device_per_stream")
            and whole
        ):
            self._plan.spec_args["upstream_order"] = True
            self._plan.orders.clear()
        elif obj.get("sample_in_epoch"):
            raise ValueError(
                "this mosaicml-streaming state was saved mid-epoch, and its order can be continued here only "
                f"for shuffle_algo in {', '.join(UPSTREAM_ALGOS)} with batching_method 'random' or "
                "'device_per_stream' and every stream "
                "read whole (no proportion/repeat/choose); this dataset has "
                f"shuffle_algo={self.shuffle_algo!r}, batching_method={self.batching_method!r}. Resume from "
                "the epoch's end, or keep those settings"
            )

    def _stream_summaries(self) -> list[dict[str, Any]]:
        return [
            stream_summary(where=_where(s), fingerprint=s.fingerprint(), choose=int(c))
            for s, c in zip(self.streams, self.choose_per_stream.tolist())
        ]

    def load_state_dict(self, obj: dict[str, Any], *, on_mixture_change: str = "error") -> None:
        """Resume from ``state_dict()`` output: the next iteration continues exactly where it stopped.

        Args:
            obj: The state.
            on_mixture_change: ``error``: the streams, their indexes and weights must be those of the state.
                ``continue``: they may differ (streams added, removed or reweighted, shards added): the run
                keeps the state's position (epoch, sample in epoch) and the rest of the epoch comes from this
                dataset's plan, which depends only on its streams and arguments (the same at any world size).
                Past that epoch's end, the next epoch starts. Every other checked argument must still match.

        A mosaicml-streaming state (what Composer checkpoints of runs on that library hold) is accepted too:
        the next iteration continues at the sample that library would have yielded next.

        Raises:
            ValueError: the state is not from this library/version, or does not match this dataset.
        """
        before = self._plan.spec_args.get("upstream_order")
        try:
            self._load_state(obj, on_mixture_change)
        except (
            BaseException
        ):  # a refused state leaves the dataset as it was (issue 39: its order stayed switched)
            if before is None:
                self._plan.spec_args.pop("upstream_order", None)
            else:
                self._plan.spec_args["upstream_order"] = before
            self._plan.orders.clear()
            raise

    def _load_state(self, obj: dict[str, Any], on_mixture_change: str) -> None:
        upstream = is_upstream_state(obj)
        if upstream:
            check_upstream_state(obj)  # before its canonical nodes size anything
        if upstream or (isinstance(obj, dict) and obj.get("order") == UPSTREAM_ORDER):
            self._follow_upstream_order(obj)
        if upstream:
            config = self._config(obj["num_canonical_nodes"])
            obj = from_upstream(obj, shuffle_seed=self.shuffle_seed, config=config)
        check_state_version(obj)
        diffs = resume_mismatches(
            obj,
            # upstream's state sets the canonical nodes
            ncn_arg=None if upstream else self._plan.ncn_arg,
            config_for=self._config,
            on_mixture_change=on_mixture_change,
            streams=self._stream_summaries(),
        )
        if diffs:
            raise ValueError("the resume state does not match this dataset: " + "; ".join(diffs))
        self._plan.restore(obj)
