"""The shuffle interface: `Shuffle` (the identity, no shuffle) and `BlockShuffle` (lazy blocks, LRU-cached).

Design note: a module of its own because the block shuffles live in two modules, `streaming.plan.shuffle`
(``py1s``, ``py2s``, ``py1br`` and the `make_shuffle` factory) and `streaming.plan.py1e` (the windowed
``py1e``); both subclass `BlockShuffle` from here, so the factory imports ``py1e`` without a cycle.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from streaming.plan.spans import NodeSpans

__all__ = ["BlockShuffle", "Shuffle"]


class Shuffle:
    """Maps (canonical node, index within the node's row) to big ids. The base class is the identity."""

    def __init__(self, *, row_start: np.ndarray) -> None:
        self.row_start = np.asarray(row_start, dtype=np.int64)

    def lookup(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Big ids of positions ``j`` (within node ``c``'s row)."""
        return self.row_start[c] + j


class BlockShuffle(Shuffle):
    """Node-local shuffles whose per-node order is a concatenation of independently computable blocks.

    Subclasses implement ``_block_guess(c, j)`` (a block id, possibly off by one for ``py1e``) and
    ``_compute_block(c, k)`` -> (first index in node, big ids in order). Computed blocks are kept in an LRU
    cache of at most ``max_cached`` big ids (default 4M, 32 MB: eight ``py1e`` windows).
    """

    def __init__(
        self, *, row_start: np.ndarray, spans: NodeSpans, seed: int, epoch: int, max_cached: int = 1 << 22
    ) -> None:
        super().__init__(row_start=row_start)
        self.spans = spans
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.max_cached = max_cached
        self._cache: OrderedDict[tuple[int, int], tuple[int, np.ndarray]] = OrderedDict()
        self._cached = 0

    def block(self, c: int, k: int) -> tuple[int, np.ndarray]:
        """Block ``k`` of node ``c``: (first index within the node, big ids), cached."""
        key = (c, k)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        got = self._compute_block(c, k)
        self._cache[key] = got
        self._cached += len(got[1])
        while self._cached > self.max_cached and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cached -= len(old[1])
        return got

    def _block_guess(self, c: int, j: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _compute_block(self, c: int, k: int) -> tuple[int, np.ndarray]:
        raise NotImplementedError

    def num_blocks(self, c: int) -> int:
        raise NotImplementedError

    def lookup(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        out = np.empty(len(j), dtype=np.int64)
        for node in np.unique(c):
            sel = np.flatnonzero(c == node)
            jj = j[sel]
            ks = self._block_guess(int(node), jj)
            # a guess may be off by a few blocks (py1e windows); step toward the right one
            while len(sel):
                miss = np.zeros(len(sel), dtype=bool)
                for k in np.unique(ks):
                    at = np.flatnonzero(ks == k)
                    start, arr = self.block(int(node), int(k))
                    rel = jj[at] - start
                    ok = (rel >= 0) & (rel < len(arr))
                    out[sel[at[ok]]] = arr[rel[ok]]
                    miss[at[~ok]] = True
                    ks[at[~ok]] += np.where(rel[~ok] < 0, -1, 1)
                sel, jj, ks = sel[miss], jj[miss], ks[miss]
        return out
