"""``device_per_stream`` batching: every device batch holds samples of one stream (mosaicml-streaming 0.13).

Unlike the other methods this order depends on the world (physical nodes N, ranks per node R, device batch
b), as upstream's does: it is the global order that, strided over the devices as every order is
(``streaming.plan.partition``), hands each device the very batches upstream's node leader gives it.

Upstream's arrangement, in our words (the index arithmetic below evaluates it lazily, per entry):

1. Each stream is partitioned on its own as if there were C physical nodes (C = canonical nodes), batch 1:
   canonical row c (its positions, short rows repeating their last one) is padded to a multiple of R by
   repeating earlier positions of the row (``pad_column``), then dealt to ranks column by column.
2. Physical node p owns the canonical rows ``[p C/N, (p + 1) C/N)``. Its sequence of a stream reads, for each
   column block i, each of its rows c, the R columns ``i R .. i R + R - 1``; cut into device batches of b, an
   incomplete last batch dropped (a stream without one complete batch is an error). Every node gets the same
   number M_s of batches of stream s.
3. One generator seeded with ``seed + epoch`` (``shuffle`` and ``balanced`` sampling, else ``seed``) shuffles,
   node after node, the node's list of stream labels (M_s copies of s); a node's k-th batch is the next unread
   batch of its k-th label's stream.
4. The node lists are interleaved (node-batch k of node p is entry ``k N + p``) and cut into global batches of
   N R device batches; slot m of a global batch goes to node ``m // R``, rank ``m % R``. So global batch j's
   slot m is node ``m % N``'s batch ``j R + m // N`` (upstream's reshape mixes the nodes this way; kept).
5. Resuming at sample s restarts at global batch ``s // G`` (upstream rounds down the same way, warning).

Differences, deliberate: when M (a node's batches) is not a multiple of R, upstream's last global batch is
partial (some devices get a batch, others none); here it is dropped so that every device gets the same number
of batches. Shuffles within a stream are this library's lazy ones unless ``upstream``
(``PlanSpec.upstream_order``) asks for mosaicml-streaming's own permutations; the stream-label sequence is
always upstream's.
"""

from __future__ import annotations

import warnings

import numpy as np

from streaming.plan.batching import GlobalOrder

__all__ = ["DevicePerStreamOrder", "pad_column"]


def pad_column(col: np.ndarray, width: int, ranks: int) -> np.ndarray:
    """The row column that padding column ``col`` (``>= width``) of a row of ``width`` repeats, when rows are
    padded to a multiple of ``ranks`` (upstream's rank padding); columns ``< width`` map to themselves."""
    col = np.asarray(col, dtype=np.int64)
    under = -width % ranks
    q = col - width
    if ranks + under - 1 <= width:
        src = width - ranks - under + 1 + q
    else:
        src = q % width
    return np.where(col < width, col, src)


class DevicePerStreamOrder(GlobalOrder):
    """One stream per device batch, devices of a global batch drawing from different streams.

    Args:
        orders: One order per stream over its canonical order F (entry ``j C + c``: row c, column j).
        num_canonical_nodes: C.
        num_nodes: Physical nodes N (must divide C).
        ranks_per_node: R (devices per node, after replication).
        batch_size: Device batch size b.
        label_seed: Seed of the stream-label shuffles.
    """

    def __init__(
        self,
        *,
        orders: list[GlobalOrder],
        num_canonical_nodes: int,
        num_nodes: int,
        ranks_per_node: int,
        batch_size: int,
        label_seed: int,
    ) -> None:
        c, n, r, b = int(num_canonical_nodes), int(num_nodes), int(ranks_per_node), int(batch_size)
        if c % n:
            raise ValueError(
                f"batching_method='device_per_stream' needs num_canonical_nodes ({c}) to be a multiple of "
                f"the number of nodes ({n})"
            )
        self.orders, self.c, self.n, self.r, self.b = orders, c, n, r, b
        self.per_node = c // n
        self.widths = np.array([len(o) // c for o in orders], dtype=np.int64)
        padded = -(-self.widths // r) * r
        # complete device batches per node, per stream
        self.counts = self.per_node * padded // b
        for s, k in enumerate(self.counts.tolist()):
            if k == 0:
                raise ValueError(
                    f"batching_method='device_per_stream': stream {s} gives each node "
                    f"{self.per_node * padded[s]} samples this epoch, fewer than one device batch ({b}); "
                    "give it more weight, use a smaller batch or batching_method='random'"
                )
        if (self.per_node * padded % b).any():
            warnings.warn(
                "batching_method='device_per_stream' drops each node's "
                "incomplete last device batch of a stream",
                stacklevel=2,
            )
        rng = np.random.default_rng(label_seed)
        base = np.repeat(np.arange(len(orders), dtype=np.int64), self.counts)
        self.labels = np.empty((n, len(base)), dtype=np.int64)
        self.occ = np.empty((n, len(base)), dtype=np.int64)
        for p in range(n):
            labels = base.copy()
            rng.shuffle(labels)
            self.labels[p] = labels
            for s in range(len(orders)):
                where = np.flatnonzero(labels == s)
                self.occ[p, where] = np.arange(len(where))
        # a trailing partial global batch is dropped
        self.num_global = len(base) // r
        self.g = b * n * r

    def __len__(self) -> int:
        return self.num_global * self.g

    def start(self, drop: int) -> int:
        """Where an epoch resumed after ``drop`` samples restarts: the last global batch boundary."""
        if drop % self.g:
            warnings.warn(
                f"batching_method='device_per_stream' resumes at a global batch boundary: sample {drop} "
                f"rounds down to {drop - drop % self.g} (global batch {self.g})",
                stacklevel=2,
            )
        return drop - drop % self.g

    def sample_ids(self, g: np.ndarray) -> np.ndarray:
        j, o = np.divmod(np.asarray(g, dtype=np.int64), self.g)
        # sample i of device d = rank * N + node (``World.device``)
        i, d = np.divmod(o, self.n * self.r)
        # upstream's slot: node * R + rank
        slot = (d % self.n) * self.r + d // self.n
        node = slot % self.n
        k = j * self.r + slot // self.n
        stream = self.labels[node, k]
        # position in the node's sequence of that stream
        x = self.occ[node, k] * self.b + i
        block, rest = np.divmod(x, self.per_node * self.r)
        row = node * self.per_node + rest // self.r
        col = block * self.r + rest % self.r
        out = np.empty(len(x), dtype=np.int64)
        for s in np.unique(stream).tolist():
            sel = stream == s
            src = pad_column(col[sel], int(self.widths[s]), self.r)
            out[sel] = self.orders[s].sample_ids(src * self.c + row[sel])
        return out
