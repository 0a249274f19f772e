"""``py1e`` ("expanding"), the default shuffle, computed window by window.

Semantics (upstream's intent): in each canonical node the spans are laid out in their shuffled order; each
span's samples are shuffled; each sample at layout index i gets the key ``x = i + delta`` where, per span of
size s and start a, ``bs' ~ U_int[0.75 bs, 1.25 bs)``, ``h = max(0, (bs' - s) / 2)`` and
``delta ~ U(max(-h, -a), min(h, L - a - s))``; the node's order is the samples sorted by x (ties have probability ~0 and are broken deterministically).
So each shard's samples spread over a window of about bs around its place, keeping few shards resident.

Design tradeoff (how ours is lazy): every key is within ``H = ceil(0.625 bs) + 1`` of its layout index, so
the samples whose keys fall in ``[v0, v1)`` are found among layout indices ``[v0 - H, v1 + H)``, and the number
of keys below v is ``max(0, v - H)`` plus a count over ``[v - H, v + H)``. Window k holds the keys in
``[k Wx, (k + 1) Wx)`` (``Wx = 2**20`` keys). Each span's keys are drawn once (and kept in an LRU cache:
neighbouring windows share most spans), so a window costs a few vector ops per nearby span plus a sort of its
Wx keys, and needs nothing else: the first sample costs one window whatever the epoch size, and a resume
starts at the window it lands in.
Each span's (shuffle, bs', deltas) come from a generator keyed by (seed, epoch, span), not from one
sequential generator as upstream.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np

from streaming.plan.shuffle_base import BlockShuffle
from streaming.plan.spans import span_rng

__all__ = ["ExpandingShuffle"]

TAG_PY1E = 41


class ExpandingShuffle(BlockShuffle):
    """The ``py1e`` shuffle (see module docstring)."""

    def __init__(self, *, block_size: int, window: int | None = None, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.block_size = int(block_size)
        self.lo_bs = max(1, int(0.75 * self.block_size))
        self.hi_bs = max(self.lo_bs + 1, int(1.25 * self.block_size))
        self.reach = -(-5 * self.block_size // 8) + 1
        self.width = (1 << 20) if window is None else max(1, int(window))
        self._warned = False
        self._spans: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._span_elems = 0
        self._span_budget = 2 * (self.width + 2 * self.reach) + (1 << 16)

    def num_blocks(self, c: int) -> int:
        return -(-int(self.spans.node_len[c]) // self.width)

    def _span_keys(self, c: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(big ids, keys) of span k in layout order (cached)."""
        hit = self._spans.get(k)
        if hit is not None:
            self._spans.move_to_end(k)
            return hit
        got = self._make_span_keys(c, k)
        self._spans[k] = got
        self._span_elems += len(got[0])
        while self._span_elems > self._span_budget and len(self._spans) > 1:
            _, old = self._spans.popitem(last=False)
            self._span_elems -= len(old[0])
        return got

    def _make_span_keys(self, c: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        sp = self.spans
        n = int(sp.length[k])
        start = int(sp.cum[k])
        node_len = int(sp.node_len[c])
        rng = span_rng(self.seed, self.epoch, TAG_PY1E, k)
        perm = rng.permutation(n)
        bsp = int(rng.integers(self.lo_bs, self.hi_bs))
        h = max(0.0, (bsp - n) / 2)
        if h == 0 and n > 1 and not self._warned:
            self._warned = True
            warnings.warn(
                f"py1e: a span of {n} samples is at least its drawn block size ({bsp}, from shuffle_block_size="
                f"{self.block_size}); its samples are not mixed with other shards. Raise shuffle_block_size "
                "(>= 10x the samples per shard is advised).",
                stacklevel=3,
            )
        lo, hi = max(-h, -start), min(h, node_len - start - n)
        keys = start + np.arange(n, dtype=np.float64) + (lo + (hi - lo) * rng.random(n))
        return sp.big_start[k] + perm, keys

    def _gather(
        self, c: int, lo: int, hi: int, v0: int, v1: int
    ) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
        """Keys below ``v0`` and the (big ids, keys) with keys in ``[v0, v1)``, over node ``c``'s spans that
        intersect layout ``[lo, hi)`` (a few vector ops per span; cheaper than sorting each span once)."""
        spans = self.spans.spans_overlapping(c, lo, hi)
        below = int(self.spans.cum[spans.start]) if len(spans) else lo  # every key before the range is < v0
        bigs, keys = [], []
        for k in spans:
            b, x = self._span_keys(c, k)
            low = x < v0
            below += int(np.count_nonzero(low))
            inside = ~low & (x < v1)
            if inside.any():
                bigs.append(b[inside])
                keys.append(x[inside])
        return below, bigs, keys

    def _block_guess(self, c: int, j: np.ndarray) -> np.ndarray:
        return np.minimum(j // self.width, self.num_blocks(c) - 1)

    def _compute_block(self, c: int, k: int) -> tuple[int, np.ndarray]:
        node_len = int(self.spans.node_len[c])
        v0, v1 = k * self.width, min((k + 1) * self.width, node_len)
        lo, hi = max(0, v0 - self.reach), min(node_len, v1 + self.reach)
        start, bigs, keys = self._gather(c, lo, hi, v0, v1)
        if not bigs:
            return start, np.empty(0, dtype=np.int64)
        big, key = np.concatenate(bigs), np.concatenate(keys)
        # keys are continuous random values (ties have probability ~0) and the input order is deterministic,
        # so the window's order is too
        order = np.argsort(key)
        return start, big[order]
