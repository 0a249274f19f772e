"""Partitioning: the canonical global order of an epoch and each device's / worker's share of it.

Design tradeoff: upstream builds a 5-D (nodes, ranks, workers, batches, batch) tensor for the whole world.
Here the partition is pure index arithmetic, evaluated only for the indices a worker asks for:

- Canonical order F (length ``C * ceil(E / C)``): the E positions are cut into C contiguous rows (row c starts
  at ``c * E // C``, the same boundaries the shuffles divide spans at, which gives download locality); F reads
  the rows column-major (``t = s * C + c``); a row shorter than ``ceil(E / C)`` repeats its last position.
- Resumption drops the first ``D`` entries of F (exactly: upstream rounds D down to a multiple of the node
  count, which repeats samples).
- Device ``d`` of ``T`` takes F' entries ``d, d + T, ...``; devices are numbered ``r * P + p`` (rank-in-node
  major) so that node p reads canonical rows ``c = p mod P`` when ``P`` divides ``C``. Every device gets
  ``ceil(len(F') / T)`` samples; the tail is padded by repeating F' backwards from its end.
- Within a device, batch j (of ``batch_size``) goes to worker ``j mod W``, the order in which a DataLoader
  collects batches round-robin; a final partial batch stays partial (no -1 padding).

Hence for a fixed global batch size G and C, global batch k is ``F'[k G, (k + 1) G)`` for every world shape.

``orig`` and ``relaxed``: since F does not depend on the world, ``relaxed`` accepts any node count (also when
resuming onto a different one), while ``orig`` keeps upstream's check that C and P divide one another. Unlike
upstream, C never pads rows for P > C (that made the order world-dependent), and an epoch smaller than C is an
error instead of a silently tiled order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CanonicalOrder", "DeviceSlice", "check_partition", "worker_batches"]


def check_partition(*, partition_algo: str, num_canonical_nodes: int, num_physical_nodes: int) -> None:
    """Validate a partition algorithm against the world.

    Raises:
        ValueError: unknown algorithm, or ``orig`` with C and P not dividing one another.
    """
    if partition_algo not in ("orig", "relaxed"):
        raise ValueError(f"partition_algo must be 'orig' or 'relaxed', got {partition_algo!r}")
    c, p = num_canonical_nodes, num_physical_nodes
    if partition_algo == "orig" and c % p and p % c:
        raise ValueError(
            f"partition_algo='orig' needs num_canonical_nodes ({c}) and the number of nodes ({p}) to divide "
            "one another; use partition_algo='relaxed' or change num_canonical_nodes"
        )


@dataclass(frozen=True)
class CanonicalOrder:
    """The canonical order F over E positions and C canonical nodes.

    Attributes:
        num_positions: E, the epoch's positions (samples incl. repeats).
        num_canonical_nodes: C.
    """

    num_positions: int
    num_canonical_nodes: int

    def __post_init__(self) -> None:
        if self.num_canonical_nodes < 1:
            raise ValueError(f"num_canonical_nodes must be >= 1, got {self.num_canonical_nodes}")
        if self.num_positions < self.num_canonical_nodes:
            raise ValueError(
                f"The number of samples assigned to a canonical node is zero: the epoch has "
                f"{self.num_positions} samples, fewer than num_canonical_nodes="
                f"{self.num_canonical_nodes}; lower num_canonical_nodes or use more data"
            )

    @property
    def row_width(self) -> int:
        """``ceil(E / C)``: entries per canonical node."""
        return -(-self.num_positions // self.num_canonical_nodes)

    def __len__(self) -> int:
        return self.row_width * self.num_canonical_nodes

    def row_start(self, c: np.ndarray | int) -> np.ndarray:
        """First position of canonical node ``c``."""
        return np.asarray(c, dtype=np.int64) * self.num_positions // self.num_canonical_nodes

    def row_len(self, c: np.ndarray | int) -> np.ndarray:
        """Positions owned by canonical node ``c``."""
        return self.row_start(np.asarray(c, dtype=np.int64) + 1) - self.row_start(c)

    def locate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """F entries ``t`` as (canonical node, index within that node's row)."""
        s, c = np.divmod(np.asarray(t, dtype=np.int64), self.num_canonical_nodes)
        return c, np.minimum(s, self.row_len(c) - 1)

    def positions(self, t: np.ndarray) -> np.ndarray:
        """F entries ``t`` as positions in ``[0, E)``."""
        c, j = self.locate(t)
        return self.row_start(c) + j


@dataclass(frozen=True)
class DeviceSlice:
    """One device's share of an order of ``total`` entries (after resumption).

    Attributes:
        total: Entries left in the epoch's global order.
        num_devices: T, devices after replication.
        device: This device's index (``r * P + p``).
    """

    total: int
    num_devices: int
    device: int

    def __post_init__(self) -> None:
        if not 0 <= self.device < self.num_devices:
            raise ValueError(f"device {self.device} out of range for {self.num_devices} devices")

    @property
    def num_samples(self) -> int:
        """Samples this device yields: ``ceil(total / T)`` (0 when the epoch is exhausted)."""
        return -(-self.total // self.num_devices)

    def global_index(self, i: np.ndarray) -> np.ndarray:
        """Index into the global order of the device's samples ``i`` (padding repeats the tail backwards)."""
        g = np.asarray(i, dtype=np.int64) * self.num_devices + self.device
        over = g >= self.total
        if over.any():
            g = g.copy()
            g[over] = self.total - 1 - (g[over] - self.total) % self.total
        return g


def worker_batches(*, num_samples: int, batch_size: int, num_workers: int, worker: int) -> range:
    """The device batches of one worker: ``worker, worker + W, ...`` (batch j covers samples
    ``[j * batch_size, min((j + 1) * batch_size, num_samples))``).

    Args:
        num_samples: Samples of the device.
        batch_size: Device batch size.
        num_workers: DataLoader workers per rank (1 when 0).
        worker: This worker's id.

    Returns:
        The batch indices, in order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 0 <= worker < num_workers:
        raise ValueError(f"worker {worker} out of range for {num_workers} workers")
    return range(worker, -(-num_samples // batch_size), num_workers)
