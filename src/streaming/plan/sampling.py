"""Stream mixing and per-shard allocation: how many times each shard's samples appear in an epoch.

Design tradeoff: the epoch's "big" id space (every chosen sample occurrence, streams and shards in order) is
never materialized. A ``Units`` table holds one row per *shuffle unit* (one full or partial repeat of a
shard), so memory is O(shards), not O(epoch); a big id is mapped to a global sample id with one binary search,
and the sorted subset of a partial repeat is drawn lazily from a generator keyed by (seed, shard), so any unit
can be resolved in isolation (what lazy, windowed per-worker plans and O(1)-ish resumption need).

Differences from upstream (mosaicml-streaming ``get_sampling`` / ``resample_streams``), same intent:
- The shortfall of relative weights is handed out by a generator keyed by ``seed`` (upstream: the same idea,
  numpy call order not replicated).
- With ``sampling_granularity == 1`` the remainder ``choose mod N`` is spread over shards with one
  multivariate-hypergeometric draw (the exact distribution of "permute all picks, take the first r"), in
  O(shards) instead of permuting N picks; larger granularities permute the ``ceil(size/g)`` picks.
- The partial-repeat subset of each shard comes from its own generator (seed', shard id), not from one
  generator shared sequentially over all shards.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Units",
    "allocate_shards",
    "build_units",
    "derived_weights",
    "epoch_sampling_seed",
    "stream_choose",
]

_TAG_SHORTFALL = 11
_TAG_ALLOC = 12
_TAG_PARTIAL = 13


def stream_choose(
    *,
    samples_per_stream: Sequence[int],
    proportion: Sequence[float | None],
    repeat: Sequence[float | None],
    choose: Sequence[int | None],
    epoch_size: int | None,
    seed: int,
) -> np.ndarray:
    """Per-epoch sample count of each stream (upstream ``Stream.apply_weights`` semantics).

    Args:
        samples_per_stream: Underlying samples of each stream.
        proportion: Relative weight of each stream (all set, or all ``None``).
        repeat: Absolute multiplier per stream, or ``None``.
        choose: Absolute count per stream, or ``None``.
        epoch_size: Total samples per epoch; only with relative (or unset) weights.
        seed: The shuffle seed (the shortfall assignment is fixed for the run).

    Returns:
        int64 array of per-stream counts.

    Raises:
        ValueError: on mixed relative/absolute weights, negative values, or ``epoch_size`` with absolute
            weights.
    """
    n = np.asarray(samples_per_stream, dtype=np.int64)
    k = len(n)
    if not (len(proportion) == len(repeat) == len(choose) == k):
        raise ValueError("proportion, repeat and choose need one entry per stream")
    for i in range(k):
        given = [v for v in (proportion[i], repeat[i], choose[i]) if v is not None]
        if len(given) > 1:
            raise ValueError(f"stream {i}: set at most one of proportion, repeat, choose")
        if given and given[0] < 0:
            raise ValueError(f"stream {i}: proportion/repeat/choose must be >= 0, got {given[0]}")
    relative = [p is not None for p in proportion]
    absolute = [r is not None or c is not None for r, c in zip(repeat, choose)]
    if any(relative) and (not all(relative) or any(absolute)):
        raise ValueError(
            "streams mix relative (proportion) and absolute (repeat/choose/unset) weights; use one style"
        )
    if epoch_size is not None and epoch_size < 0:
        raise ValueError(f"epoch_size must be >= 0, got {epoch_size}")
    if all(relative) and k:
        weights = np.asarray(proportion, dtype=np.float64)
        total = int(n.sum()) if epoch_size is None else int(epoch_size)
        return _split_relative(weights, total, seed)
    if epoch_size is not None:
        if any(absolute):
            raise ValueError("epoch_size cannot be combined with repeat/choose weights; use proportion")
        return _split_relative(n.astype(np.float64), int(epoch_size), seed)
    out = n.copy()
    for i in range(k):
        c, r = choose[i], repeat[i]
        if c is not None:
            out[i] = int(c)
        elif r is not None:
            out[i] = int(r * n[i])
    return out


def derived_weights(
    *,
    samples_per_stream: Sequence[int],
    choose_per_stream: Sequence[int],
    proportion: Sequence[float | None],
    epoch_size: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(proportion, repeat) of each stream as mosaicml-streaming writes them back onto its ``Stream`` objects:
    the given proportions normalized (relative weights), else each stream's share of the underlying samples
    (``epoch_size`` without weights), else its share of the epoch;
    ``repeat`` = chosen / underlying samples."""
    n = np.asarray(samples_per_stream, dtype=np.float64)
    chosen = np.asarray(choose_per_stream, dtype=np.float64)
    if len(proportion) and all(p is not None for p in proportion):
        base = np.asarray(proportion, dtype=np.float64)
    elif epoch_size is not None:
        base = n
    else:
        base = chosen
    share = base / base.sum() if base.sum() > 0 else np.zeros_like(base)
    repeat = np.divide(chosen, n, out=np.zeros_like(chosen), where=n > 0)
    return share, repeat


def _split_relative(weights: np.ndarray, total: int, seed: int) -> np.ndarray:
    if weights.sum() <= 0:
        raise ValueError("stream proportions must not all be zero")
    p = weights / weights.sum()
    out = np.floor(total * p).astype(np.int64)
    short = total - int(out.sum())
    if short > 0:
        rng = np.random.default_rng([seed, _TAG_SHORTFALL])
        out[rng.choice(len(p), short, replace=False)] += 1
    return out


def epoch_sampling_seed(*, seed: int, epoch: int, sampling_method: str, shuffle: bool) -> int:
    """The seed of per-epoch resampling: ``seed + epoch`` for ``balanced`` (shuffled or not, as upstream: the
    partial repeats of a stream differ every epoch), ``seed`` for ``fixed`` (the same samples every epoch)."""
    if sampling_method not in ("balanced", "fixed"):
        raise ValueError(f"Invalid sampling method: {sampling_method!r}; it must be 'balanced' or 'fixed'")
    return seed + epoch if sampling_method == "balanced" else seed


def allocate_shards(
    shard_sizes: np.ndarray, *, choose: int, granularity: int, seed: int, stream: int = 0
) -> np.ndarray:
    """How many samples each shard of one stream contributes to an epoch.

    Args:
        shard_sizes: Samples per shard of the stream.
        choose: The stream's per-epoch count.
        granularity: Size of the contiguous "picks" the remainder is handed out in.
        seed: Resampling seed (see ``epoch_sampling_seed``).
        stream: The stream's index (keys its generator).

    Returns:
        int64 allocation per shard, summing to ``choose``.
    """
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if granularity < 1:
        raise ValueError(f"sampling_granularity must be >= 1, got {granularity}")
    if total == 0:
        if choose:
            raise ValueError(f"cannot choose {choose} samples from an empty stream")
        return sizes.copy()
    whole, rem = divmod(int(choose), total)
    alloc = sizes * whole
    if rem == 0:
        return alloc
    rng = np.random.default_rng([seed, _TAG_ALLOC, stream, total, int(choose)])
    if granularity == 1:
        return alloc + rng.multivariate_hypergeometric(sizes, rem)
    picks = -(-sizes // granularity)
    owner = np.repeat(np.arange(len(sizes)), picks)
    first = np.concatenate([[0], np.cumsum(picks)[:-1]])
    pick_idx = np.arange(len(owner)) - first[owner]
    pick_len = np.minimum(granularity, sizes[owner] - pick_idx * granularity)
    order = rng.permutation(len(owner))
    taken = np.cumsum(pick_len[order])
    # picks order[:n_full+1] cover rem
    n_full = int(np.searchsorted(taken, rem, side="left"))
    extra = np.zeros(len(sizes), dtype=np.int64)
    np.add.at(extra, owner[order[:n_full]], pick_len[order[:n_full]])
    extra[owner[order[n_full]]] += rem - (int(taken[n_full - 1]) if n_full else 0)
    return alloc + extra


@dataclass
class Units:
    """Shuffle units of one epoch: each is one full or partial repeat of a shard, in stream/shard order.

    Attributes:
        sizes: Samples per unit.
        offsets: Big-id start of each unit (length ``num_units + 1``; the last entry is the epoch size).
        shard: Global shard id of each unit.
        base: Global sample id of the first sample of the unit's shard.
        shard_size: Samples in the unit's shard (a unit with ``size < shard_size`` is a partial repeat).
        seed: Seed of the partial-repeat subsets.
    """

    sizes: np.ndarray
    offsets: np.ndarray
    shard: np.ndarray
    base: np.ndarray
    shard_size: np.ndarray
    seed: int
    _cache: OrderedDict[int, np.ndarray] = field(default_factory=OrderedDict, repr=False)

    @property
    def num_samples(self) -> int:
        return int(self.offsets[-1])

    def subset(self, unit: int) -> np.ndarray:
        """Sorted shard-local sample indices of a partial unit (drawn without replacement)."""
        hit = self._cache.get(unit)
        if hit is not None:
            self._cache.move_to_end(unit)
            return hit
        rng = np.random.default_rng([self.seed, _TAG_PARTIAL, int(self.shard[unit])])
        got = np.sort(rng.choice(int(self.shard_size[unit]), int(self.sizes[unit]), replace=False))
        self._cache[unit] = got
        if len(self._cache) > 64:
            self._cache.popitem(last=False)
        return got

    def to_sample_ids(self, big: np.ndarray) -> np.ndarray:
        """Map big ids (``0 <= big < num_samples``) to global sample ids."""
        big = np.asarray(big, dtype=np.int64)
        unit = np.searchsorted(self.offsets, big, side="right") - 1
        local = big - self.offsets[unit]
        out = self.base[unit] + local
        partial = self.sizes[unit] < self.shard_size[unit]
        if partial.any():
            for u in np.unique(unit[partial]):
                sel = unit == u
                out[sel] = self.base[u] + self.subset(int(u))[local[sel]]
        return out

    def select(self, start: int, stop: int) -> Units:
        """Units ``[start, stop)`` as their own table (big ids rebased to 0)."""
        off = self.offsets[start : stop + 1] - self.offsets[start]
        return Units(
            sizes=self.sizes[start:stop],
            offsets=off,
            shard=self.shard[start:stop],
            base=self.base[start:stop],
            shard_size=self.shard_size[start:stop],
            seed=self.seed,
        )


def build_units(*, shard_sizes: np.ndarray, alloc: np.ndarray, seed: int) -> Units:
    """Build the unit table from per-shard sizes and allocations (all streams, in order).

    Args:
        shard_sizes: Samples per shard (global shard order).
        alloc: Per-epoch allocation per shard (``allocate_shards`` per stream, concatenated).
        seed: Seed of partial-repeat subsets.

    Returns:
        The epoch's ``Units``; zero-size units are omitted.
    """
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    alloc = np.asarray(alloc, dtype=np.int64)
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    safe = np.maximum(sizes, 1)
    full = np.where(sizes > 0, alloc // safe, 0)
    part = np.where(sizes > 0, alloc % safe, 0)
    count = full + (part > 0)
    shard = np.repeat(np.arange(len(sizes), dtype=np.int64), count)
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    rank = np.arange(len(shard), dtype=np.int64) - first[shard]
    unit_size = np.where(rank < full[shard], sizes[shard], part[shard])
    offsets = np.concatenate([[0], np.cumsum(unit_size)]).astype(np.int64)
    return Units(
        sizes=unit_size.astype(np.int64),
        offsets=offsets,
        shard=shard,
        base=base[shard],
        shard_size=sizes[shard],
        seed=seed,
    )
