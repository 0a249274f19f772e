"""Shard downloads under Belady's rule in `cache_pressure.py`'s limited passes (a reference: the fewest possible
when each batch reads one shard; with batches of several shards, which must be resident together, a plan can do
better, see tests/scripts/test_cache_bound.py).

Design note: a lower bound to set a measured download count against. The jobs' readers (every DataLoader
worker of every job) advance in step, one batch each per tick; a reader keeps the shards of its current chunk
(`chunk` batches: the samples it prepares ahead) and may not lose them; every other cached shard may be
evicted. A shard a reader needs that is not cached is one download; with the cache full, the victim is the
cached shard whose next use by any reader is the farthest (Belady's rule: no policy that keeps each shard it
fetches, as the library's does, makes fewer downloads), and when every cached shard is kept, the shard is
read without being kept (still one download).
Readers in step is a model: real jobs drift apart and start at different times. `reader_batches` gives each
reader's batches of shard ids by iterating the jobs' own loaders over a local copy of the dataset.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np


def best_possible_downloads(readers: Sequence[Sequence[Sequence[int]]], capacity: int, chunk: int) -> int:
    """Downloads under Belady's eviction for `readers` (each a list of batches, each the shard ids it
    reads) advancing in step through a cache of `capacity` shards, each keeping its current chunk's shards."""
    uses: dict[int, list[int]] = defaultdict(list)
    for batches in readers:
        for t, batch in enumerate(batches):
            for shard in batch:
                uses[shard].append(t)
    for times in uses.values():
        times.sort()

    def next_use(shard: int, t: int) -> float:
        times = uses[shard]
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else math.inf

    cache: set[int] = set()
    downloads = 0
    for t in range(max((len(b) for b in readers), default=0)):
        kept = {
            shard
            for batches in readers
            for batch in batches[(t // chunk) * chunk : (t // chunk + 1) * chunk]
            for shard in batch
        }
        for batches in readers:
            if t >= len(batches):
                continue
            for shard in batches[t]:
                if shard in cache:
                    continue
                downloads += 1
                if len(cache) >= capacity:
                    idle = [k for k in cache if k not in kept]
                    if not idle:
                        continue  # read without keeping it
                    cache.discard(max(idle, key=lambda k: (next_use(k, t), k)))
                cache.add(shard)
    return downloads


def reader_batches(
    local: str, *, seeds: Sequence[int], workers: int, batch_size: int, block: int, epochs: int
) -> list[list[list[int]]]:
    """Each reader's batches of shard ids (a reader per job and DataLoader worker), read by the jobs' own
    loaders from the dataset at `local` (batches come from the workers in turn)."""
    from streaming import StreamingDataLoader, StreamingDataset

    readers: list[list[list[int]]] = []
    for seed in seeds:
        ds = StreamingDataset(
            local=local,
            batch_size=batch_size,
            shuffle=True,
            shuffle_seed=seed,
            shuffle_block_size=block or None,
        )
        bounds = np.cumsum([s.samples for s in ds.shards])
        loader = StreamingDataLoader(ds, batch_size=batch_size, num_workers=workers)
        mine: list[list[list[int]]] = [[] for _ in range(max(workers, 1))]
        for _ in range(epochs):
            for b, batch in enumerate(loader):
                ids = np.asarray([int(i) for i in batch["id"]])
                shards = np.unique(np.searchsorted(bounds, ids, side="right"))
                mine[b % max(workers, 1)].append(shards.tolist())
        readers += mine
    return readers
