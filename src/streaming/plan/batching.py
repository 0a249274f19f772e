"""Batching methods: the epoch's global sample order, evaluated lazily at any index.

Design tradeoff: every method is expressed as a *global order* (index -> sample id) that is independent of
the world; devices and workers then take strided slices of it (``streaming.plan.partition``). So elastic
determinism and resumption at any sample (not only at global-batch boundaries, as upstream's stratified /
per_stream) hold for every method, and nothing bigger than O(shards + global batches) is ever materialized.

- ``random``: one canonical order over all streams' units, shuffled as a whole.
- ``per_stream``: each stream gets its own canonical order and shuffle; its complete global batches are kept
  (incomplete ones dropped) and the batch -> stream sequence is a seeded shuffle of stream labels.
- ``stratified``: every global batch holds ``floor(p_s G)`` samples of stream s (leftover slots to the largest
  fractional parts); the epoch ends when the first stream runs out (the rest is dropped, with a warning).
- ``device_per_stream``: every device batch holds one stream's samples; world-dependent, as upstream's
  (``streaming.plan.device_per_stream``).
"""

from __future__ import annotations

import warnings

import numpy as np

from streaming.plan.partition import CanonicalOrder
from streaming.plan.sampling import Units
from streaming.plan.shuffle import Shuffle, make_shuffle
from streaming.plan.spans import span_rng

__all__ = ["BATCHING_METHODS", "GlobalOrder", "PerStreamOrder", "RandomOrder", "StratifiedOrder"]

BATCHING_METHODS = ("random", "stratified", "per_stream", "device_per_stream")
TAG_LABELS = 51


class GlobalOrder:
    """An epoch's order: ``len(order)`` entries, ``order.sample_ids(g)`` -> global sample ids."""

    def __len__(self) -> int:
        raise NotImplementedError

    def sample_ids(self, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def start(self, drop: int) -> int:
        """Where an epoch resumed after ``drop`` consumed samples restarts
        (exactly there, for most orders)."""
        return drop


class RandomOrder(GlobalOrder):
    """Canonical order over ``units`` with C canonical nodes, optionally shuffled.

    Args:
        units: The epoch's shuffle units.
        num_canonical_nodes: C.
        shuffle_algo: Shuffle algorithm, or ``None`` for no shuffle.
        seed: Shuffle seed.
        epoch: Epoch.
        block_size: Block size of block shuffles.
        window: ``py1e`` window override (tests).
        upstream: mosaicml-streaming's own shuffled order (``streaming.plan.upstream_shuffle``).
    """

    def __init__(
        self,
        *,
        units: Units,
        num_canonical_nodes: int,
        shuffle_algo: str | None,
        seed: int,
        epoch: int,
        block_size: int,
        window: int | None = None,
        upstream: bool = False,
    ) -> None:
        self.units = units
        self.canonical = CanonicalOrder(units.num_samples, num_canonical_nodes)
        row_start = self.canonical.row_start(np.arange(num_canonical_nodes + 1))
        self.shuffle: Shuffle = make_shuffle(
            algo=shuffle_algo,
            unit_sizes=units.sizes,
            row_start=row_start,
            num_canonical_nodes=num_canonical_nodes,
            seed=seed,
            epoch=epoch,
            block_size=block_size,
            window=window,
            upstream=upstream,
        )

    def __len__(self) -> int:
        return len(self.canonical)

    def big_ids(self, g: np.ndarray) -> np.ndarray:
        """Big ids (positions after shuffling) of order entries ``g``."""
        c, j = self.canonical.locate(g)
        return self.shuffle.lookup(c, j)

    def sample_ids(self, g: np.ndarray) -> np.ndarray:
        return self.units.to_sample_ids(self.big_ids(g))


class PerStreamOrder(GlobalOrder):
    """Whole global batches of one stream at a time, in a seeded stream-label order.

    Args:
        orders: One ``RandomOrder`` per stream (empty streams excluded).
        global_batch_size: G.
        label_seed: Seed of the batch -> stream sequence.
    """

    def __init__(self, *, orders: list[GlobalOrder], global_batch_size: int, label_seed: int) -> None:
        self.orders = orders
        self.g = int(global_batch_size)
        counts = np.array([len(o) // self.g for o in orders], dtype=np.int64)
        for i, n in enumerate(counts):
            if n == 0:
                raise ValueError(
                    f"batching_method='per_stream': stream {i} has {len(orders[i])} samples this epoch, "
                    f"fewer than one global batch ({self.g}); give it more weight "
                    "or use batching_method='random'"
                )
        labels = np.repeat(np.arange(len(orders)), counts)
        self.labels = labels[span_rng(label_seed, TAG_LABELS).permutation(len(labels))]
        occ = np.empty(len(self.labels), dtype=np.int64)
        for s in range(len(orders)):
            where = np.flatnonzero(self.labels == s)
            occ[where] = np.arange(len(where))
        self.occ = occ

    def __len__(self) -> int:
        return len(self.labels) * self.g

    def sample_ids(self, g: np.ndarray) -> np.ndarray:
        k, o = np.divmod(np.asarray(g, dtype=np.int64), self.g)
        stream = self.labels[k]
        local = self.occ[k] * self.g + o
        out = np.empty(len(local), dtype=np.int64)
        for s in np.unique(stream):
            sel = stream == s
            out[sel] = self.orders[int(s)].sample_ids(local[sel])
        return out


class StratifiedOrder(GlobalOrder):
    """Every global batch holds a fixed share of each stream.

    Args:
        orders: One order per stream.
        sizes: Per-epoch samples of each stream (its weight).
        global_batch_size: G.
    """

    def __init__(self, *, orders: list[GlobalOrder], sizes: np.ndarray, global_batch_size: int) -> None:
        self.orders = orders
        self.g = int(global_batch_size)
        sizes = np.asarray(sizes, dtype=np.float64)
        exact = sizes / sizes.sum() * self.g
        share = np.floor(exact).astype(np.int64)
        left = self.g - int(share.sum())
        # largest remainders first; among equal ones the later stream first, as upstream orders them
        if left:
            share[np.flip(np.argsort(exact - share))[:left]] += 1
        if (share <= 0).any():
            empty = int(np.flatnonzero(share <= 0)[0])
            raise ValueError(
                f"Number of samples for stream {empty} per global batch is 0: batching_method='stratified': "
                f"its share of a global batch of {self.g} rounds to 0 "
                f"samples (shares {share.tolist()}), so its samples would never be read; raise the global "
                "batch size or that stream's weight, or use batching_method='random'"
            )
        self.share = share
        self.cum = np.concatenate([[0], np.cumsum(share)]).astype(np.int64)
        used = share > 0
        per = np.array([len(o) // max(int(b), 1) for o, b in zip(orders, share)])
        self.num_batches = int(per[used].min()) if used.any() else 0
        if self.num_batches == 0:
            raise ValueError(
                "Number of samples for stream is less than its share of a global batch: "
                f"batching_method='stratified': a stream has fewer samples than its share of a global batch "
                f"(shares {share.tolist()}); use a smaller batch or batching_method='random'"
            )
        dropped = int(sum(len(o) for o in orders)) - self.num_batches * self.g
        if dropped > 0:
            warnings.warn(
                f"batching_method='stratified' drops {dropped} samples this epoch: streams run out at "
                "different times",
                stacklevel=2,
            )

    def __len__(self) -> int:
        return self.num_batches * self.g

    def sample_ids(self, g: np.ndarray) -> np.ndarray:
        k, o = np.divmod(np.asarray(g, dtype=np.int64), self.g)
        stream = np.searchsorted(self.cum, o, side="right") - 1
        out = np.empty(len(o), dtype=np.int64)
        for s in np.unique(stream):
            sel = stream == s
            out[sel] = self.orders[int(s)].sample_ids(k[sel] * self.share[s] + (o[sel] - self.cum[s]))
        return out
