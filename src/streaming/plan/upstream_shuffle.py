"""mosaicml-streaming's own shuffled orders, bit for bit: to continue a run that started on that library.

Design note: this library's shuffles (``streaming.plan.shuffle``) keep upstream's names and properties but not
its orders: they are lazy, block by block, with counter-based randomness, where upstream computes each epoch's
whole permutation with numpy's ``default_rng`` in one pass. A run checkpointed under mosaicml-streaming
records only (epoch, samples consumed, canonical nodes, seed): continuing it here without duplicates or gaps
needs the very order upstream was following, so this module computes it as upstream specifies it (the spec:
``../shared/docs/streaming.md`` section 4.5), with the same numpy generator calls in the same sequence:

1. The epoch's shuffle units become spans of the big-id range, in unit order. A generator seeded with ``seed``
   (per run) shuffles the list of spans; the spans are then divided into C parts cut at ``E * (c + 1) // C``
   (a span across a cut is split, its first piece going to the earlier part).
2. A generator seeded with ``seed + epoch`` shuffles each part's list of spans in turn.
3. ``py1s``: each span's ids are shuffled, node after node, span after span.
   ``py1e``: per node, each span's ids are shuffled (every span of the node first); then for each span a
   block size ``integers(0.75 bs, 1.25 bs)`` is drawn and each of its samples moved by a uniform offset within
   half of what the block leaves beyond the span (clipped to the node); the node's ids are ordered by their
   moved positions (numpy's default argsort).
   ``naive``: ``default_rng(seed + epoch).permutation(E)``.

The permutation costs O(E) memory per epoch, as upstream's does; it is used only for runs that continue an
upstream order (``PlanSpec.upstream_order``). ``py1br`` and ``py2s`` are not reproduced.
"""

from __future__ import annotations

import numpy as np

from streaming.plan.shuffle_base import Shuffle

__all__ = ["UPSTREAM_ALGOS", "UpstreamShuffle", "upstream_permutation"]

UPSTREAM_ALGOS = ("naive", "py1s", "py1e")


def _divide(
    spans: list[tuple[int, int]], total: int, parts: int
) -> tuple[list[tuple[int, int]], list[range]]:
    """Spans cut at the C part boundaries, and each part's range of indices into them."""
    out: list[tuple[int, int]] = []
    ranges: list[range] = []
    queue = list(spans)
    i = done = 0
    for part in range(parts):
        first = len(out)
        end = total * (part + 1) // parts
        while i < len(queue):
            begin, stop = queue[i]
            if done + (stop - begin) > end:
                # split: the first piece stays in this part
                if done < end:
                    cut = end - done
                    out.append((begin, begin + cut))
                    queue[i] = (begin + cut, stop)
                    done += cut
                break
            out.append((begin, stop))
            done += stop - begin
            i += 1
        ranges.append(range(first, len(out)))
    return out, ranges


def _expand(ids: np.ndarray, sizes: np.ndarray, rng: np.random.Generator, block_size: int) -> np.ndarray:
    """``py1e``'s step 3 for one node: ``ids`` (its spans' shuffled ids, concatenated) reordered by jittered
    positions."""
    n = len(ids)
    positions = np.arange(n, dtype=np.float64)
    start = 0
    for size in sizes.tolist():
        drawn = rng.integers(int(0.75 * block_size), int(1.25 * block_size))
        half = max((drawn - size) / 2, 0)
        low, high = max(-half, -start), min(half, n - start - size)
        positions[start : start + size] += rng.uniform(low=low, high=high, size=size)
        start += size
    return ids[np.argsort(positions)]


def upstream_permutation(
    algo: str, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """mosaicml-streaming 0.13's permutation of the big ids ``[0, E)`` for ``algo``
    (one of ``UPSTREAM_ALGOS``).

    Raises:
        ValueError: Another algorithm, or a canonical node left without samples (dataset smaller than C).
    """
    sizes = np.asarray(unit_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if algo == "naive":
        return np.random.default_rng(seed + epoch).permutation(total).astype(np.int64)
    if algo not in UPSTREAM_ALGOS:
        raise ValueError(
            f"shuffle_algo={algo!r}: continuing a mosaicml-streaming order is supported for "
            f"{', '.join(UPSTREAM_ALGOS)}"
        )
    ends = np.cumsum(sizes)
    spans: list[tuple[int, int]] = [(int(e - s), int(e)) for s, e in zip(sizes, ends)]
    # a list, shuffled in place
    np.random.default_rng(seed).shuffle(spans)
    spans, parts = _divide(spans, total, num_canonical_nodes)
    rng = np.random.default_rng(seed + epoch)
    for part in parts:
        piece = spans[part.start : part.stop]
        rng.shuffle(piece)
        spans[part.start : part.stop] = piece
    out = np.empty(total, dtype=np.int64)
    offset = 0
    for part in parts:
        node = spans[part.start : part.stop]
        node_sizes = np.array([b - a for a, b in node], dtype=np.int64)
        count = int(node_sizes.sum())
        if algo == "py1e" and count == 0:
            raise ValueError(
                f"a canonical node gets no samples: the dataset has fewer samples than num_canonical_nodes="
                f"{num_canonical_nodes}"
            )
        pieces = []
        for a, b in node:
            ids = np.arange(a, b)
            rng.shuffle(ids)
            pieces.append(ids)
        ids = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
        if algo == "py1e":
            ids = _expand(ids, node_sizes, rng, block_size)
        out[offset : offset + count] = ids
        offset += count
    return out


class UpstreamShuffle(Shuffle):
    """A shuffle that looks positions up in a precomputed upstream permutation."""

    def __init__(self, *, row_start: np.ndarray, permutation: np.ndarray) -> None:
        super().__init__(row_start=row_start)
        self.permutation = permutation

    def lookup(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self.permutation[self.row_start[np.asarray(c, dtype=np.int64)] + np.asarray(j, dtype=np.int64)]
