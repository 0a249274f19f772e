"""Workers hand over groups of whole batches; the rank puts them back in the one global batch order.

Design note: every item a DataLoader worker returns costs a fixed amount on both sides (torch's per-item
machinery: an index sent to the worker, a result queue put with its feeder thread, a get and a reorder in the
rank; measured ~60-80 us of rank CPU and ~50 us of worker CPU per item on the 2-core dev VM), however small
the item. So with workers a ``StreamingDataLoader`` reads through a second DataLoader over ``GroupedBatches``
(``batch_size=None``): each worker collates whole batches itself and returns up to ``group`` of them as one
item (the first item of an iteration holds one batch, so the first batch is not delayed). The global order
is unchanged: worker ``w`` of ``W`` owns device batches ``w, w + W, ...`` (``streaming.plan.partition
.worker_batches``) in order, so ``interleave`` yields batch ``g`` as the next batch of worker ``g % W``,
pulling items until that worker has one; the first worker with none left ends the epoch (batch ``g`` does not
exist). The loader counts the batches it yields, never the ones buffered, so resume states stay exact.
When the collate function names the ``columns`` it reads, a worker reads each batch's samples together
(``streaming.reader.batch_read``: unread refs from the same iteration, one column read per shard) and collates
a ``ColumnBatch``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from streaming.reader.batch_read import read_batch

__all__ = ["GROUP", "BatchGroup", "GroupedBatches", "interleave"]

GROUP = 4
"""Batches per worker item (after the first): a quarter of the per-item cost per batch,
4 batches in flight."""


class BatchGroup:
    """Consecutive batches of one worker (``WorkerBatch`` es in transit, converted ones in the rank)."""

    def __init__(self, worker: int, batches: list[Any]) -> None:
        self.worker, self.batches = worker, batches

    def to_tensors(self) -> BatchGroup:
        return BatchGroup(self.worker, [_convert(b, pin=False) for b in self.batches])

    def pin_memory(self) -> BatchGroup:
        """Each batch converted and pinned (DataLoader's pin thread calls this)."""
        return BatchGroup(self.worker, [_convert(b, pin=True) for b in self.batches])


def _convert(batch: Any, *, pin: bool) -> Any:
    if hasattr(batch, "to_tensors"):
        return batch.pin_memory() if pin else batch.to_tensors()
    return batch


class GroupedBatches(IterableDataset):
    """The worker side: this worker's share of ``dataset``'s iteration, collated, ``group`` batches per item.

    Args:
        dataset: The ``StreamingDataset`` (its iteration in a worker is that worker's batches, in order).
        batch_size: Device batch size.
        collate: Samples -> one batch (the worker half: a ``SplitCollator``'s ``pack``).
        drop_last: Drop a final partial batch.
        group: Batches per item after the first.
        columns: The sample keys ``collate`` reads: batches are read as ``ColumnBatch`` es (see the module
            note); None: a list of sample dicts each.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int,
        collate: Callable[[Any], Any],
        drop_last: bool,
        group: int,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.dataset, self.batch_size, self.collate = dataset, batch_size, collate
        self.drop_last, self.group = drop_last, group
        self.columns = None if columns is None else tuple(columns)

    def __iter__(self) -> Iterator[BatchGroup]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        columns, tag = self.columns, getattr(self.dataset, "stream_tag", None)
        samples = iter(self.dataset) if columns is None else self.dataset._iter_refs()
        size = 1
        while True:
            batches = []
            for _ in range(size):
                chunk = list(islice(samples, self.batch_size))
                if not chunk or (self.drop_last and len(chunk) < self.batch_size):
                    break
                batches.append(self.collate(chunk if columns is None else read_batch(chunk, columns, tag)))
            if batches:
                yield BatchGroup(worker, batches)
            if len(batches) < size:
                return
            size = self.group


def interleave(groups: Iterable[BatchGroup], num_workers: int) -> Iterator[Any]:
    """The batches of ``groups`` (each worker's in its order) in the global order: batch ``g`` from worker
    ``g % num_workers`` (see the module note); ends at the first batch whose worker has none left."""
    pending: list[deque[Any]] = [deque() for _ in range(num_workers)]
    source = iter(groups)
    worker = 0
    while True:
        while not pending[worker]:
            item = next(source, None)
            if item is None:
                return
            pending[item.worker].extend(item.batches)
        yield pending[worker].popleft()
        worker = (worker + 1) % num_workers
