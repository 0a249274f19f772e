"""``StreamingDataLoader``: a ``torch.utils.data.DataLoader`` that can save and restore its position.

Design tradeoff: the loader, not the dataset, knows how many samples the training loop actually consumed
(workers prefetch ahead), so it counts the samples of each batch it hands out and turns that into the
dataset's global ``sample_in_epoch`` (x devices: every device consumes the same number per step). It also
advances the dataset's epoch counter in the rank process (workers only ever see copies) and detects the
world in the rank process before workers start, so workers never touch the process group.

It never draws from torch's global RNG: a plain ``DataLoader`` takes the workers' base seed (and a shuffling
sampler's seed) from it each time an iterator is created, so a resumed run, which creates its first iterator
at another point of the random stream than the uninterrupted run did, would see different dropout masks.
Unless the caller passes a ``generator``, the loader owns one, reseeded before each iteration of a
``StreamingDataset`` from the dataset's ``shuffle_seed`` and the epoch it is about to run (so worker seeds
are the same after a resume), or seeded once from ``torch.initial_seed()`` for other datasets.

Transport: tensors returned by a worker travel through a fresh shared-memory segment each, which dominates at
token-batch sizes. So with workers, a batch is collated in two halves: the worker builds a ``WorkerBatch``
(compact numpy arrays: the default ``numpy_collate``, or the ``pack`` half of a ``SplitCollator`` such as
foundry's text collator, which sends narrow token ids), and the rank process turns it into tensors
(``WorkerBatch.to_tensors``: widening, derived tensors such as labels). Over a ``StreamingDataset`` each
worker collates whole batches and returns several per item, put back in the global order here
(``streaming.loader.batch_groups``). The arrays cross in reusable shared-memory slots, one arena per worker
(``streaming.loader.shared_batches``; the pipe when no slot is free). With ``pin_memory=True`` DataLoader's
pin thread does that conversion and pins the result (torch pins any object with a ``pin_memory()`` method;
numpy arrays it would leave unpinned).
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

from streaming.loader.batch_groups import GROUP, BatchGroup, GroupedBatches, interleave
from streaming.loader.shared_batches import ArenaRegistry, SharedBatch, SharedBatchCollate
from streaming.reader.dataset import StreamingDataset

__all__ = ["NumpyBatch", "SplitCollator", "StreamingDataLoader", "WorkerBatch"]

_WORKER_SETTINGS = ("worker_init_fn", "timeout", "pin_memory", "pin_memory_device")
"""Loader options read when workers start, kept equal on the grouped DataLoader when set later."""


def _batch_len(batch: Any) -> int:
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()))
    elif isinstance(batch, list | tuple) and batch and not isinstance(batch[0], int | float | str | bytes):
        batch = batch[0]
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else len(batch)


class WorkerBatch(ABC):
    """A batch as a worker sends it (numpy arrays, pickled through the pipe); tensors in the rank process."""

    @abstractmethod
    def to_tensors(self) -> Any:  # the batch the training loop gets
        """The batch of tensors (runs in the rank process, or in DataLoader's pin-memory thread)."""

    def pin_memory(self) -> Any:
        """``to_tensors()`` with every tensor pinned: DataLoader's pin thread calls this."""
        return pin_tensors(self.to_tensors())


WorkerBatch.register(SharedBatch)
WorkerBatch.register(BatchGroup)


class SplitCollator(ABC):
    """A collate function in two halves: ``pack`` (samples -> a compact ``WorkerBatch``) and its
    ``to_tensors``.

    A ``StreamingDataLoader`` with workers runs ``pack`` in them and ``to_tensors`` in the rank process;
    called directly (or with ``num_workers=0``) it does both. A subclass that sets ``columns`` (the sample
    keys ``pack`` reads) opts in to the workers' batch read path: over a ``StreamingDataset`` its ``pack``
    gets a ``streaming.reader.batch_read.ColumnBatch`` (a sequence of sample dicts with only those keys and
    the stream tag, plus whole columns as arrays).
    """

    columns: tuple[str, ...] | None = None

    @abstractmethod
    def pack(self, samples: list[Any]) -> WorkerBatch:
        """The worker half."""

    def __call__(self, samples: list[Any]) -> Any:
        return self.pack(samples).to_tensors()


class NumpyBatch(WorkerBatch):
    """A ``numpy_collate`` result in transit; ``to_tensors`` wraps its arrays without copying."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def to_tensors(self) -> Any:
        return to_tensors(self.data)


def pin_tensors(batch: Any) -> Any:
    """``batch`` with each tensor (in dicts, lists, tuples) replaced by a pinned copy."""
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return {k: pin_tensors(v) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(pin_tensors(v) for v in batch)
    return batch


def numpy_batch_collate(samples: Sequence[Any]) -> NumpyBatch:
    """The workers' default collate: ``numpy_collate`` in a ``NumpyBatch``."""
    return NumpyBatch(numpy_collate(samples))


def numpy_collate(samples: Sequence[Any]) -> Any:
    """``default_collate`` that leaves numeric batches as numpy arrays (turned into tensors by the consumer;
    see the module note on transport)."""
    first = samples[0]
    if isinstance(first, Mapping):
        return {key: numpy_collate([s[key] for s in samples]) for key in first}
    if isinstance(first, np.ndarray) and all(
        isinstance(s, np.ndarray) and s.shape == first.shape and s.dtype == first.dtype for s in samples
    ):
        return np.stack(samples)
    if isinstance(first, np.generic | bool | int | float) and not isinstance(first, np.str_ | np.bytes_):
        if all(type(s) is type(first) for s in samples):
            return np.asarray(samples)
    return default_collate(list(samples))


@contextmanager
def frozen_heap(forks: bool) -> Iterator[None]:
    """While forked workers start (``forks``), the parent's objects sit in the collector's permanent
    generation (``gc.freeze``), so a worker's collections never walk them: each walk wrote to every
    inherited object's header, copying the parent's heap page by page (torch's included). At 8 workers on 2
    cores that copying was about half of each worker's CPU before its first sample. The parent's own
    collector is as before once the workers have started (``gc.unfreeze``)."""
    if not forks:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def iteration_seed(seed: int, epoch: int) -> int:
    """The loader generator's seed for one epoch of a dataset with ``seed`` (a pure function, 63 bits).

    The label ``streaming.dataloader`` is part of the seed, not a module path: it stays as it is (changing it
    changes every run's order)."""
    digest = hashlib.sha256(f"streaming.dataloader:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def unprofiled(it: Any) -> Iterator[Any]:  # a torch _BaseDataLoaderIter
    """``it``'s items without the ``record_function`` span torch's ``__next__`` opens per item (~25 us, a
    tenth of the rank's per-batch cost with workers) unless a profiler is recording: ``__next__`` calls
    ``_next_data`` and counts, plus a warning for IterableDatasets that yield more than their ``len``, which a
    ``StreamingDataset`` never does."""
    next_data = getattr(it, "_next_data", None)
    while True:
        if next_data is None or it._sampler_iter is None or torch._C._autograd._profiler_enabled():
            item = next(it, _END)  # the plain path (it also resets a fresh iterator)
            if item is _END:
                return
        else:
            try:
                item = next_data()
            except StopIteration:
                return
            it._num_yielded += 1
        yield item


_END = object()


def same(item: Any) -> Any:
    """The identity (a picklable collate function for items that are batches already)."""
    return item


def to_tensors(batch: Any) -> Any:
    """Turn the numpy arrays of a ``numpy_collate`` batch into tensors without copying."""
    if isinstance(batch, np.ndarray):
        return torch.from_numpy(batch)
    if isinstance(batch, dict):
        return {k: to_tensors(v) for k, v in batch.items()}
    if isinstance(batch, list):
        return [to_tensors(v) for v in batch]
    return batch


class StreamingDataLoader(DataLoader):
    """A DataLoader with ``state_dict()`` / ``load_state_dict()`` for mid-epoch resumption.

    Args:
        dataset: The dataset (a ``StreamingDataset`` for resumption).
        *args: Passed to ``DataLoader``.
        **kwargs: Passed to ``DataLoader``; ``batch_size`` must equal the dataset's ``batch_size``.
    """

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(dataset, StreamingDataset):
            bs = kwargs.get("batch_size", args[0] if args else 1)
            # A dataset without batch_size is refused when iterated (StreamingDataset's own check),
            # as upstream.
            if dataset.batch_size is not None and bs != dataset.batch_size:
                raise ValueError(
                    f"the DataLoader batch_size ({bs}) differs from StreamingDataset batch_size "
                    f"({dataset.batch_size}); they must be equal for the sample "
                    "order and resumption to be right"
                )
        # Workers send WorkerBatches, this process makes tensors (see the module note on transport): numeric
        # columns as numpy by default (same values and dtypes as default_collate), a SplitCollator's `pack`.
        # Any other collate_fn is used as given.
        self._arenas = ArenaRegistry()
        collate = kwargs.get("collate_fn")
        pack = numpy_batch_collate if collate is None else getattr(collate, "pack", None)
        split = kwargs.get("num_workers", 0) > 0 and (collate is None or isinstance(collate, SplitCollator))
        # slots per worker: what DataLoader keeps in flight from it, one being converted, one spare
        slots = (kwargs.get("prefetch_factor") or 2) + 2
        if split and not isinstance(dataset, StreamingDataset):
            kwargs["collate_fn"] = SharedBatchCollate(pack, self._arenas, slots=slots)  # type: ignore[arg-type]
        # An own generator keeps iterator creation off torch's global RNG (see the module docstring).
        self._own_generator = kwargs.get("generator") is None
        if self._own_generator:
            kwargs["generator"] = torch.Generator().manual_seed(torch.initial_seed())
        super().__init__(dataset, *args, **kwargs)
        self.num_samples_yielded = 0
        self._grouped: DataLoader | None = None
        if split and isinstance(dataset, StreamingDataset) and dataset.batch_size is not None:
            self._grouped = self._group_loader(dataset, pack, slots)  # type: ignore[arg-type]

    def __setattr__(self, name: str, value: Any) -> None:
        """Worker settings changed after construction (e.g. a `worker_init_fn` chained in to shield the
        workers from preemption signals) also reach the grouped DataLoader whose workers actually run."""
        super().__setattr__(name, value)
        if name in _WORKER_SETTINGS and getattr(self, "_grouped", None) is not None:
            setattr(self._grouped, name, value)

    def _group_loader(
        self, dataset: StreamingDataset, pack: Callable[[list[Any]], Any], slots: int
    ) -> DataLoader:
        """The DataLoader this one reads through with workers (``streaming.loader.batch_groups``): the same
        workers, seeds (one generator), pinning and options, over ``GroupedBatches``, batches travelling in
        slots."""
        assert self.batch_size is not None
        columns = (
            getattr(self.collate_fn, "columns", None) if isinstance(self.collate_fn, SplitCollator) else None
        )
        grouped = GroupedBatches(
            dataset,
            batch_size=self.batch_size,
            collate=pack,
            drop_last=self.drop_last,
            group=GROUP,
            columns=columns,
        )
        return DataLoader(
            grouped,
            batch_size=None,
            num_workers=self.num_workers,
            collate_fn=SharedBatchCollate(same, self._arenas, slots=slots),
            pin_memory=self.pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=self.generator,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
            pin_memory_device=self.pin_memory_device,
            in_order=self.in_order,
        )

    def _get_iterator(self) -> Any:  # a torch _BaseDataLoaderIter
        return self._grouped._get_iterator() if self._grouped is not None else super()._get_iterator()

    def _forks_workers(self) -> bool:
        """Whether workers start as forks of this process (a copy of its memory), not fresh interpreters."""
        if self.num_workers == 0:
            return False
        ctx = self.multiprocessing_context  # DataLoader keeps a context object (a name given is looked up)
        if ctx is not None:
            return ctx.get_start_method() == "fork"
        default = multiprocessing.get_all_start_methods()[0]  # the platform's, when none was set
        return (multiprocessing.get_start_method(allow_none=True) or default) == "fork"

    # a generator that counts the batches it hands out, not DataLoader's `_BaseDataLoaderIter`
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds = self.dataset if isinstance(self.dataset, StreamingDataset) else None
        self.num_samples_yielded = 0
        if ds is not None:
            ds._check_iterable()  # world detection and argument checks in the rank process
            reuse = self.persistent_workers and getattr(self, "_iterator", None) is not None
            if self._forks_workers() and not reuse:
                ds._warm_for_fork(self.num_workers)  # forked workers inherit the first window, client models
            # worker seeds depend on (seed, epoch) only: the same after a resume
            if self._own_generator:
                self.generator.manual_seed(iteration_seed(ds.shuffle_seed, ds._next()[0]))
        self._arenas.drop_exited()  # arenas of workers that have exited (an earlier iterator's)
        with frozen_heap(self._forks_workers()):
            it = super().__iter__()
        if ds is not None and self.num_workers > 0:
            ds._begin_epoch()  # workers work on copies; keep the rank's epoch counter in step
            ds._drop_plan_caches()
        items = (x.to_tensors() if isinstance(x, WorkerBatch) else x for x in unprofiled(it))
        # (with pin_memory the pin thread has converted them; BatchGroup.to_tensors converts what is left)
        batches = interleave(items, self.num_workers) if self._grouped is not None else items
        for batch in batches:
            self.num_samples_yielded += _batch_len(batch)
            yield batch

    def state_dict(self) -> dict[str, Any] | None:
        """The dataset's resume state at the samples consumed so far (``None`` for other datasets)."""
        ds = self.dataset
        if not isinstance(ds, StreamingDataset):
            return None
        devices = ds._rank_world().num_devices
        return ds.state_dict(num_samples=self.num_samples_yielded * devices, from_beginning=False)

    def load_state_dict(self, obj: dict[str, Any], *, on_mixture_change: str = "error") -> None:
        """Restore a state; the next ``iter(loader)`` continues exactly where it was saved.

        ``on_mixture_change`` is passed to ``StreamingDataset.load_state_dict`` (``continue``: a changed
        stream mixture keeps the saved position and draws the rest from the new one)."""
        ds = self.dataset
        if not isinstance(ds, StreamingDataset):
            return
        if self.persistent_workers and getattr(self, "_iterator", None) is not None:
            raise ValueError(
                "load_state_dict after persistent workers started cannot reach them; create a new "
                "StreamingDataLoader (or call load_state_dict before the first iteration)"
            )
        ds.load_state_dict(obj, on_mixture_change=on_mixture_change)
