"""``py1e`` ("expanding"), the default shuffle, computed window by window from counter-based random values.

Semantics (upstream's intent): in each canonical node the spans are laid out in their shuffled order; each
span's samples are shuffled; each sample at layout index i gets the key ``x = i + delta`` where, per span of
size s and start a, ``bs' ~ U_int[0.75 bs, 1.25 bs)``, ``h = max(0, (bs' - s) / 2)`` and
``delta ~ U(max(-h, -a), min(h, L - a - s))``; the node's order is the samples sorted by x (ties have
probability ~0 and are broken by layout index). So each shard's samples spread over a window of about bs
around its place, keeping few shards resident.

Design tradeoff (how ours is lazy): every key is within ``H = ceil(0.625 bs) + 1`` of its layout index, so
the samples whose keys fall in ``[v0, v1)`` are found among layout indices ``[v0 - H, v1 + H)``, and the
number of keys below v0 is ``max(0, v0 - H)`` plus a count over that range. Windows hold ``Wx = 2**19`` keys
(``[(k - m) Wx, (k - m + 1) Wx)`` for k > m; a window of 2**20 keys took 2.6x as long to sort, for 10% less
per sample in the steady state), after a ramp of windows Wx/2**m, Wx/2**m, Wx/2**(m-1), ..., Wx/2 keys, since
the first sample pays for a whole window. A window costs a key pass over the slots of its reach (at most the
node) plus a sort and permutation of the samples inside, ~8x as much per sample as the pass, so the first
window is the smallest ``Wx/2**m`` (m in 3..7) of at least ``min(node, reach) / 8`` keys: ``Wx/8`` (65536
keys) for big nodes, 8192 keys for the 60k-sample epoch of issue 14 (which was one window: 15 ms of CPU before
the first sample, now ~3). Not smaller: keys are sparse near a node's start (~0.2 samples per key under the
default block size), a window too thin for the first batches of 64 workers means a second pass over the reach.
The windows only partition the key axis, so the order does not depend on them. A window needs nothing but the
O(spans) span table, so the first sample costs one small window whatever the epoch size, and a resume starts
at the window it lands in. Every random value is counter-based (``streaming.plan.counter_rng``), keyed by
(seed, epoch) and a position: slot i's delta fraction by (node, i), span k's ``bs'`` and within-span
permutation by k. A window is therefore a few vector ops over the slots in its reach, taken in chunks that
keep only the keys inside ``[v0, v1)`` (and the sample of a slot is found, by evaluating the span's
permutation at that slot, only for those), with no per-span generator and no per-span state. Plan version 2;
version 1 drew each span's values from its own ``numpy`` generator (same distribution, different order;
``streaming.reader.resume_state`` refuses a mid-epoch state of the other version).
"""

from __future__ import annotations

import warnings

import numpy as np

from streaming.plan.counter_rng import derive_key, hash64, permute, uniform
from streaming.plan.shuffle_base import BlockShuffle

__all__ = ["ExpandingShuffle"]

TAG_PY1E_DELTA = 42
TAG_PY1E_BLOCK = 43
TAG_PY1E_PERM = 44
# slots per vector pass (~40 MB of temporaries)
_CHUNK = 1 << 19
# windows before the full width at most: Wx/128, Wx/128, Wx/64, ..., Wx/2 (they add up to Wx)
_MAX_RAMP = 8
# at least: Wx/8, Wx/8, Wx/4, Wx/2
_MIN_RAMP = 4


class ExpandingShuffle(BlockShuffle):
    """The ``py1e`` shuffle (see module docstring)."""

    def __init__(self, *, block_size: int, window: int | None = None, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.block_size = int(block_size)
        self.lo_bs = max(1, int(0.75 * self.block_size))
        self.hi_bs = max(self.lo_bs + 1, int(1.25 * self.block_size))
        self.reach = -(-5 * self.block_size // 8) + 1
        self.width = (1 << 19) if window is None else max(1, int(window))
        self.chunk = _CHUNK
        self._warned = False
        span = min(int(self.spans.node_len.max(initial=0)), self.reach)
        self.ramp = _MIN_RAMP
        while self.ramp < _MAX_RAMP and (self.width >> self.ramp) * 8 >= span:
            self.ramp += 1
        self._block_key = derive_key(self.seed, self.epoch, TAG_PY1E_BLOCK)
        self._perm_key = derive_key(self.seed, self.epoch, TAG_PY1E_PERM)

    def window_start(self, k: int) -> int:
        """The first key of window ``k`` (see the module docstring's ramp)."""
        if k < self.ramp:
            return 0 if k == 0 else (self.width << (k - 1)) >> (self.ramp - 1)
        return (k - self.ramp + 1) * self.width

    def num_blocks(self, c: int) -> int:
        node_len = int(self.spans.node_len[c])
        if node_len > self.width:
            return self.ramp - 1 + -(-node_len // self.width)
        return sum(1 for k in range(self.ramp) if self.window_start(k) < node_len)

    def _span_spread(self, c: int, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low end, width) of the delta range of spans ``ks`` of node ``c``."""
        sp = self.spans
        n = sp.length[ks]
        start = sp.cum[ks]
        bsp = self.lo_bs + (uniform(self._block_key, ks) * (self.hi_bs - self.lo_bs)).astype(np.int64)
        h = np.maximum(0.0, (bsp - n) / 2)
        if not self._warned and np.any((h == 0) & (n > 1)):
            self._warned = True
            i = int(np.flatnonzero((h == 0) & (n > 1))[0])
            warnings.warn(
                "Shuffle block size was smaller than shard size for some shards (their samples are not "
                "shuffled with other shards; set shuffle_block_size to a larger value for a higher quality "
                f"shuffle): py1e: a span of {int(n[i])} samples is at least its drawn block size "
                f"({int(bsp[i])}, from shuffle_block_size={self.block_size}); its samples are not mixed with "
                "other shards. Raise shuffle_block_size (>= 10x the samples per shard is advised).",
                stacklevel=4,
            )
        lo = np.maximum(-h, -start)
        hi = np.minimum(h, int(sp.node_len[c]) - start - n)
        return lo, hi - lo

    def slot_keys(self, c: int, p0: int, p1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(layout indices, span of each, key of each) for slots ``[p0, p1)`` of node ``c``."""
        ks = np.arange(*self._span_range(c, p0, p1)[:2], dtype=np.int64)
        sp = self.spans
        first = np.maximum(sp.cum[ks], p0)
        last = np.minimum(sp.cum[ks] + sp.length[ks], p1)
        span = np.repeat(ks, last - first)
        pos = np.arange(p0, p1, dtype=np.int64)
        lo, width = self._span_spread(c, ks)
        rel = span - ks[0] if len(ks) else span
        keys = uniform(derive_key(self.seed, self.epoch, TAG_PY1E_DELTA, c), pos)
        keys *= width[rel]
        keys += lo[rel]
        keys += pos
        return pos, span, keys

    def _span_range(self, c: int, p0: int, p1: int) -> tuple[int, int]:
        r = self.spans.spans_overlapping(c, p0, p1)
        return r.start, r.stop

    def slot_samples(self, pos: np.ndarray, span: np.ndarray) -> np.ndarray:
        """Big ids held by layout slots ``pos`` of spans ``span`` (each span's samples, permuted)."""
        sp = self.spans
        if not len(span):
            return np.empty(0, dtype=np.int64)
        k0 = int(span.min())
        ks = np.arange(k0, int(span.max()) + 1, dtype=np.int64)
        keys = hash64(self._perm_key, ks)
        local = permute(pos - sp.cum[span], span - k0, keys, sp.length[ks])
        return sp.big_start[span] + local

    def _compute_block(self, c: int, k: int) -> tuple[int, np.ndarray]:
        node_len = int(self.spans.node_len[c])
        v0, v1 = self.window_start(k), min(self.window_start(k + 1), node_len)
        lo, hi = max(0, v0 - self.reach), min(node_len, v1 + self.reach)
        # every key of a slot before `lo` is < v0
        below = lo
        bigs, keys = [], []
        for p0 in range(lo, hi, self.chunk):
            pos, span, x = self.slot_keys(c, p0, min(hi, p0 + self.chunk))
            low = x < v0
            below += int(np.count_nonzero(low))
            inside = np.flatnonzero(~low & (x < v1))
            if len(inside):
                bigs.append(self.slot_samples(pos[inside], span[inside]))
                keys.append(x[inside])
        if not bigs:
            return below, np.empty(0, dtype=np.int64)
        key = np.concatenate(keys)
        # slots are gathered in layout order, so a stable sort breaks (improbable) ties by layout index
        order = np.argsort(key, kind="stable")
        return below, np.concatenate(bigs)[order]

    def _block_guess(self, c: int, j: np.ndarray) -> np.ndarray:
        ramp = np.array([self.window_start(k) for k in range(self.ramp + 1)], dtype=np.int64)
        full = self.ramp - 1 + j // self.width
        k = np.where(j < self.width, np.searchsorted(ramp, j, side="right") - 1, full)
        return np.minimum(k, self.num_blocks(c) - 1)
