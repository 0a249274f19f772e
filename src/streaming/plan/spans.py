"""Dividing shuffle units into per-canonical-node spans (upstream ``divide_spans``), O(units) memory.

Design tradeoff: the spans of all nodes are kept as a handful of flat arrays (one row per span, a few per
unit) so a node's layout index maps to a big id with one binary search, and every span gets a stable global
index that keys its own random generator. That is what lets the block shuffles compute any window of a node's
order in isolation instead of shuffling the whole epoch.

The unit order is shuffled once per run (``seed``), the sequence is cut at the canonical-row boundaries
``E * c // C`` (a unit straddling a boundary is split, the earlier piece going to the earlier node), and the
span order within each node is shuffled per epoch (``seed``, ``epoch``), as upstream (one ``permutation`` per
node: plan version 2; version 1 sorted random keys, ~25x slower at 500k spans).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NodeSpans", "divide_spans", "span_rng"]

TAG_RUN_ORDER = 21
TAG_NODE_ORDER = 22


def span_rng(*key: int) -> np.random.Generator:
    """A generator keyed by non-negative ints (seed, epoch, tag, index...)."""
    return np.random.default_rng([int(k) for k in key])


@dataclass(frozen=True)
class NodeSpans:
    """Spans of every canonical node in layout order, flattened.

    Attributes:
        big_start: Big id of each span's first sample.
        length: Samples per span.
        unit: Unit index of each span.
        unit_off: Offset of the span inside its unit.
        cum: Layout index of each span's first sample within its node.
        node_ptr: Spans of node c are ``node_ptr[c]:node_ptr[c + 1]``.
        node_len: Samples per node (row length of the canonical order).
    """

    big_start: np.ndarray
    length: np.ndarray
    unit: np.ndarray
    unit_off: np.ndarray
    cum: np.ndarray
    node_ptr: np.ndarray
    node_len: np.ndarray

    def span_of(self, c: int, j: np.ndarray) -> np.ndarray:
        """Global span index of layout indices ``j`` of node ``c``."""
        lo, hi = int(self.node_ptr[c]), int(self.node_ptr[c + 1])
        return lo + np.searchsorted(self.cum[lo:hi], j, side="right") - 1

    def layout_to_big(self, c: int, j: np.ndarray) -> np.ndarray:
        """Big ids at layout indices ``j`` of node ``c`` (spans concatenated, unshuffled)."""
        k = self.span_of(c, j)
        return self.big_start[k] + (j - self.cum[k])

    def spans_overlapping(self, c: int, lo: int, hi: int) -> range:
        """Global indices of node ``c``'s spans that intersect layout range ``[lo, hi)``."""
        a, b = int(self.node_ptr[c]), int(self.node_ptr[c + 1])
        first = a + int(np.searchsorted(self.cum[a:b], lo, side="right")) - 1
        last = a + int(np.searchsorted(self.cum[a:b], hi, side="left"))
        return range(max(first, a), min(last, b))


def divide_spans(
    *,
    unit_sizes: np.ndarray,
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    run_order: np.ndarray | None = None,
) -> NodeSpans:
    """Shuffle units (per run), cut them into C node parts, shuffle span order per node (per epoch).

    Args:
        unit_sizes: Samples per unit (all > 0).
        num_canonical_nodes: C.
        seed: Shuffle seed.
        epoch: Epoch (keys the per-node span order).
        run_order: Unit order to divide (default: a per-run random permutation).

    Returns:
        The spans.
    """
    sizes = np.asarray(unit_sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(offsets[-1])
    c_count = int(num_canonical_nodes)
    if run_order is None:
        run_order = span_rng(seed, TAG_RUN_ORDER).permutation(len(sizes))
    sizes_r = sizes[run_order]
    ends = np.cumsum(sizes_r)
    starts = ends - sizes_r
    bounds = np.arange(1, c_count, dtype=np.int64) * total // c_count
    # the cuts: the unit starts (ascending, distinct: sizes > 0) merged with the node bounds not among them
    at = np.searchsorted(starts, bounds)
    new = (at >= len(starts)) | (starts[np.minimum(at, len(starts) - 1)] != bounds)
    cuts = np.concatenate([np.insert(starts, at[new], bounds[new]), [total]])
    a, b = cuts[:-1], cuts[1:]
    ur = np.searchsorted(ends, a, side="right")
    node = np.searchsorted(bounds, a, side="right")
    unit = run_order[ur]
    unit_off = a - starts[ur]
    # `a` ascends, so `node` does: each node's spans are a contiguous run, permuted in place per epoch
    node_ptr = np.searchsorted(node, np.arange(c_count + 1), side="left").astype(np.int64)
    rng = span_rng(seed, epoch, TAG_NODE_ORDER)
    order = np.concatenate(
        [node_ptr[c] + rng.permutation(int(node_ptr[c + 1] - node_ptr[c])) for c in range(c_count)]
    )
    node, unit, unit_off, length = node[order], unit[order], unit_off[order], (b - a)[order]
    csum = np.cumsum(length) - length
    cum = csum - csum[node_ptr[node]] if len(node) else csum
    node_len = np.diff(np.concatenate([[0], bounds, [total]]))
    return NodeSpans(
        big_start=offsets[unit] + unit_off,
        length=length,
        unit=unit,
        unit_off=unit_off,
        cum=cum,
        node_ptr=node_ptr,
        node_len=node_len,
    )
