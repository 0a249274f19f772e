"""Shuffle algorithms, evaluated lazily: (canonical node, index in node) -> big id, one block at a time.

Design tradeoff: upstream computes the whole epoch's permutation up front (O(E) time and memory on one
process). Here each node's order is a concatenation of independent *blocks* whose contents depend only on
(seed, epoch, node, block) and the O(units) span table, so a worker computes just the blocks holding the
positions it yields, keeps a few in an LRU cache, and a resume jumps straight to the block it needs.

Algorithms (same names and intent as upstream; orders differ since numpy call order is not replicated):
- ``naive``: a global permutation with no locality, as a keyed Feistel network with cycle walking, so any
  position maps to its big id in O(1) without materializing anything.
- ``py1s``: span order shuffled per run, divided at the canonical rows, span order shuffled per node per
  epoch, samples shuffled within each span. Blocks = spans.
- ``py2s``: additionally each unit's samples are shuffled once per run before division, and each piece again
  per epoch. Blocks = spans.
- ``py1br``: the node's spans laid out unshuffled, cut into blocks of random size ``U[0.75 bs, 1.25 bs)``
  after a random per-node stagger ``U[0, 0.75 bs)`` that shortens the first block; samples shuffled within
  each block by a counter-based permutation evaluated only at the positions asked for
  (``counter_rng.permute``), so no block (~bs samples) is ever materialized. Unlike upstream the blocks do not
  overlap (upstream shuffles one overlap region twice).
- ``py1e``: see ``streaming.plan.py1e``.
- ``none`` (shuffle off): the identity.

Plan versions (``plan_version``): a resume state records the version of its algorithm's order, so a mid-epoch
state is never continued in a different order. Version 2 (counter-based values in ``py1e`` and ``py1br``, one
``permutation`` per node for the span order of every block shuffle) changed ``py1s``, ``py2s``, ``py1br`` and
``py1e``; ``naive`` and no shuffle are still version 1.
"""

from __future__ import annotations

import numpy as np

from streaming.plan.counter_rng import derive_key, hash64, permute
from streaming.plan.py1e import ExpandingShuffle
from streaming.plan.shuffle_base import BlockShuffle, Shuffle
from streaming.plan.spans import NodeSpans, divide_spans, span_rng
from streaming.plan.upstream_shuffle import UpstreamShuffle, upstream_permutation

__all__ = ["PLAN_VERSIONS", "SHUFFLE_ALGOS", "BlockShuffle", "Shuffle", "make_shuffle", "plan_version"]

SHUFFLE_ALGOS = ("naive", "py1s", "py2s", "py1br", "py1e")
PLAN_VERSIONS = {"naive": 1, "py1s": 2, "py2s": 2, "py1br": 2, "py1e": 2}
"""Version of each algorithm's sample order (bumped whenever the same inputs give a different order)."""
TAG_NAIVE = 31
TAG_SPAN = 32
TAG_UNIT = 33
TAG_BR_BOUNDS = 34
# plan version 2 (35: version 1, one generator per block)
TAG_BR_PERM = 36
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


class NaiveShuffle(Shuffle):
    """A keyed bijection on ``[0, E)`` (4-round Feistel network, cycle walking)."""

    def __init__(self, *, row_start: np.ndarray, total: int, seed: int, epoch: int) -> None:
        super().__init__(row_start=row_start)
        self.total = int(total)
        bits = max(2, int(self.total - 1).bit_length())
        self.half = (bits + 1) // 2
        self.keys = span_rng(seed, epoch, TAG_NAIVE).integers(0, 2**62, size=4, dtype=np.uint64)

    def _round(self, x: np.ndarray, key: np.uint64) -> np.ndarray:
        z = (x + key) * np.uint64(0x9E3779B97F4A7C15)
        z ^= z >> np.uint64(31)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(29)
        return z & np.uint64((1 << self.half) - 1)

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        mask = np.uint64((1 << self.half) - 1)
        left, right = x >> h, x & mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << h) | right

    def permute(self, pos: np.ndarray) -> np.ndarray:
        """The permutation applied to positions in ``[0, E)``."""
        x = np.asarray(pos, dtype=np.uint64)
        todo = np.ones(len(x), dtype=bool)
        out = x.copy()
        while todo.any():
            out[todo] = self._encrypt(out[todo])
            todo = out >= np.uint64(self.total)
        return out.astype(np.int64)

    def lookup(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self.permute(self.row_start[c] + j)


class SpanShuffle(BlockShuffle):
    """``py1s`` (and ``py2s`` with ``presort=True``): blocks are the node's spans."""

    def __init__(self, *, unit_offsets: np.ndarray, presort: bool, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.unit_offsets = np.asarray(unit_offsets, dtype=np.int64)
        self.presort = presort

    def _block_guess(self, c: int, j: np.ndarray) -> np.ndarray:
        return self.spans.span_of(c, j)

    def _compute_block(self, c: int, k: int) -> tuple[int, np.ndarray]:
        sp = self.spans
        n = int(sp.length[k])
        perm = span_rng(self.seed, self.epoch, TAG_SPAN, k).permutation(n)
        if not self.presort:
            return int(sp.cum[k]), sp.big_start[k] + perm
        u = int(sp.unit[k])
        usize = int(self.unit_offsets[u + 1] - self.unit_offsets[u])
        sigma = span_rng(self.seed, TAG_UNIT, u).permutation(usize)
        return int(sp.cum[k]), self.unit_offsets[u] + sigma[int(sp.unit_off[k]) + perm]


class BlockRandomShuffle(Shuffle):
    """``py1br``: random-size blocks over the node's unshuffled layout, each permuted; evaluated pointwise."""

    def __init__(
        self, *, row_start: np.ndarray, spans: NodeSpans, seed: int, epoch: int, block_size: int
    ) -> None:
        super().__init__(row_start=row_start)
        self.spans = spans
        self.seed, self.epoch = int(seed), int(epoch)
        self.block_size = int(block_size)
        self._bounds: dict[int, np.ndarray] = {}

    def bounds(self, c: int) -> np.ndarray:
        """Block boundaries of node ``c`` (starts, then the node length)."""
        got = self._bounds.get(c)
        if got is None:
            n = int(self.spans.node_len[c])
            bs = self.block_size
            lo, hi = max(1, int(0.75 * bs)), max(2, int(1.25 * bs))
            rng = span_rng(self.seed, self.epoch, TAG_BR_BOUNDS, c)
            stagger = int(rng.integers(0, lo))
            sizes = rng.integers(lo, hi, size=n // lo + 2)
            sizes[0] -= stagger
            ends = np.cumsum(sizes)
            ends = ends[: int(np.searchsorted(ends, n, side="left")) + 1]
            got = np.concatenate([[0], np.minimum(ends, n)]).astype(np.int64)
            self._bounds[c] = got
        return got

    def num_blocks(self, c: int) -> int:
        return len(self.bounds(c)) - 1

    def layout_index(self, c: int, j: np.ndarray) -> np.ndarray:
        """Layout indices of node ``c`` at positions ``j``: each block's slots, permuted (counter-based)."""
        b = self.bounds(c)
        k = np.searchsorted(b, j, side="right") - 1
        if not len(k):
            return k
        k0, k1 = int(k.min()), int(k.max()) + 1
        keys = hash64(derive_key(self.seed, self.epoch, TAG_BR_PERM, c), np.arange(k0, k1, dtype=np.int64))
        return b[k] + permute(j - b[k], k - k0, keys, np.diff(b[k0 : k1 + 1]))

    def lookup(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        out = np.empty(len(j), dtype=np.int64)
        for node in np.unique(c):
            sel = np.flatnonzero(c == node)
            out[sel] = self.spans.layout_to_big(int(node), self.layout_index(int(node), j[sel]))
        return out


def plan_version(algo: str | None) -> int:
    """The order version of shuffle ``algo`` (``None``: no shuffle, version 1; unknown names: 0)."""
    return 1 if algo is None else PLAN_VERSIONS.get(algo, 0)


def make_shuffle(
    *,
    algo: str | None,
    unit_sizes: np.ndarray,
    row_start: np.ndarray,
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int,
    window: int | None = None,
    upstream: bool = False,
) -> Shuffle:
    """Build the shuffle of one epoch.

    Args:
        algo: One of ``SHUFFLE_ALGOS``, or ``None`` for no shuffle.
        unit_sizes: Samples per shuffle unit (big-id order).
        row_start: First position of each canonical node's row (length C + 1, the last being E).
        num_canonical_nodes: C.
        seed: Shuffle seed.
        epoch: Epoch.
        block_size: Block size of ``py1br`` / ``py1e``.
        window: ``py1e`` window width override (tests use small ones to exercise many windows).
        upstream: mosaicml-streaming's own order (``streaming.plan.upstream_shuffle``), precomputed.

    Returns:
        The shuffle.
    """
    if algo is None:
        return Shuffle(row_start=row_start)
    if algo not in SHUFFLE_ALGOS:
        raise ValueError(f"shuffle_algo must be one of {SHUFFLE_ALGOS}, got {algo!r}")
    if block_size < 1:
        raise ValueError(f"shuffle_block_size must be >= 1, got {block_size}")
    sizes = np.asarray(unit_sizes, dtype=np.int64)
    if upstream:
        perm = upstream_permutation(algo, sizes, num_canonical_nodes, seed, epoch, block_size)
        return UpstreamShuffle(row_start=row_start, permutation=perm)
    if algo == "naive":
        return NaiveShuffle(row_start=row_start, total=int(sizes.sum()), seed=seed, epoch=epoch)
    run_order = None
    # the per-run unit shuffle is part of the "fixed" pass
    if algo == "py2s":
        run_order = span_rng(seed, TAG_UNIT).permutation(len(sizes))
    spans = divide_spans(
        unit_sizes=sizes, num_canonical_nodes=num_canonical_nodes, seed=seed, epoch=epoch, run_order=run_order
    )
    if algo == "py1br":
        return BlockRandomShuffle(
            row_start=row_start, spans=spans, seed=seed, epoch=epoch, block_size=block_size
        )
    kw = {"row_start": row_start, "spans": spans, "seed": seed, "epoch": epoch}
    if algo in ("py1s", "py2s"):
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        return SpanShuffle(unit_offsets=offsets, presort=algo == "py2s", **kw)
    return ExpandingShuffle(block_size=block_size, window=window, **kw)
