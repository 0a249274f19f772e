"""Worker -> rank transport of ``WorkerBatch`` arrays through reusable shared-memory slots.

Design note: a batch that a DataLoader worker returns is pickled through one pipe (64 KiB of kernel buffer),
so a 256 KiB token batch costs a pickle copy, a write that blocks four times until the rank drains the pipe,
a read and an unpickle copy (measured with py-spy, 2 workers, 32 x 2048 int32 tokens: half of the rank
process's samples in ``Connection._recv``, a third of each worker's in ``Connection._send``). Torch's own
answer, a tensor, costs a fresh shared-memory segment (and a file descriptor passed over a socket) per
tensor. Here each worker owns one ``SlotArena``: ``slots`` fixed-size slots in one shared uint8 tensor and a
flag per slot (1: in use), created on its first batch and sent to the rank once (torch shares its memory).
A batch's arrays are copied into a free slot and only their places cross the pipe (``SharedBatch``); the rank
reads them in place (its ``to_tensors`` copies anyway: widening, pinning) and clears the flag. With no free
slot (the rank holds every one) or a batch larger than a slot (a new, larger arena follows), the batch goes
through the pipe as before: the slots are a fast path, never a condition for correctness.

State: the rank keeps the arenas it received in ``ArenaRegistry`` (one per ``StreamingDataLoader``), which
``SharedBatch`` finds at unpickling through a process-local table of live registries (weak references, keyed
by the loader's token): unpickling is the only place a batch passes through, and it gets no arguments. A
flag is cleared with a plain store after the copy out of the slot finished; the worker reuses a slot only
after reading that store (a control dependency), and a slot is released once (``SharedBatch.release``, or when
an unconverted batch is collected, e.g. discarded when persistent workers restart an epoch).
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from stackbase.process import pid_alive

__all__ = ["ArenaRegistry", "SharedBatch", "SharedBatchCollate", "SlotArena"]

_ALIGN = 64
_REGISTRIES: weakref.WeakValueDictionary[str, ArenaRegistry] = weakref.WeakValueDictionary()
"""The rank's live registries by loader token (process-local; see the module note)."""


@dataclass(frozen=True)
class _Ref:
    """Where one array of a batch lies in its slot."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


@dataclass
class SlotArena:
    """``slots`` slots of ``slot_bytes`` in one shared uint8 tensor, and one in-use flag per slot."""

    key: str
    slot_bytes: int
    data: torch.Tensor
    flags: torch.Tensor

    @classmethod
    def create(cls, key: str, slot_bytes: int, slots: int) -> SlotArena:
        data = torch.empty(slot_bytes * slots, dtype=torch.uint8).share_memory_()
        return cls(key, slot_bytes, data, torch.zeros(slots, dtype=torch.uint8).share_memory_())

    def view(self, slot: int, ref: _Ref) -> np.ndarray:
        """The array ``ref`` of ``slot`` (a view into shared memory)."""
        dtype = np.dtype(ref.dtype)
        start = slot * self.slot_bytes + ref.offset
        nbytes = int(np.prod(ref.shape, dtype=np.int64)) * dtype.itemsize
        return self.data.numpy()[start : start + nbytes].view(dtype).reshape(ref.shape)

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s memory lies in this arena (``to_tensors`` returned a view, not a copy)."""
        start = self.data.data_ptr()
        return start <= tensor.data_ptr() < start + self.data.numel()


@dataclass
class ArenaRegistry:
    """The arenas a rank received from its workers (see the module note); ``token`` names it to them."""

    token: str = field(default_factory=lambda: os.urandom(8).hex())
    arenas: dict[str, SlotArena] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _REGISTRIES[self.token] = self

    def drop_exited(self) -> None:
        """Forget the arenas of workers that have exited (an earlier iterator's; their batches are gone)."""
        for key in list(self.arenas):
            if not pid_alive(int(key.split(":")[1])):
                del self.arenas[key]


def _strip(obj: Any, arrays: list[np.ndarray]) -> Any:
    """``obj`` with each numpy array (in dicts, lists, tuples, object attributes) replaced by its index in
    ``arrays`` (appended); other values kept."""
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        arrays.append(obj)
        return _Slot(len(arrays) - 1)
    if isinstance(obj, dict):
        return {k: _strip(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list | tuple) and not hasattr(obj, "_fields"):
        return type(obj)(_strip(v, arrays) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        copy = object.__new__(type(obj))
        copy.__dict__.update({k: _strip(v, arrays) for k, v in obj.__dict__.items()})
        return copy
    return obj


def _fill(obj: Any, get: Callable[[int], Any]) -> Any:
    """The inverse of ``_strip``: each ``_Slot(i)`` replaced by ``get(i)`` (in place for objects)."""
    if isinstance(obj, _Slot):
        return get(obj.index)
    if isinstance(obj, dict):
        return {k: _fill(v, get) for k, v in obj.items()}
    if isinstance(obj, list | tuple) and not hasattr(obj, "_fields"):
        return type(obj)(_fill(v, get) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        obj.__dict__.update({k: _fill(v, get) for k, v in obj.__dict__.items()})
    return obj


@dataclass(frozen=True)
class _Slot:
    index: int


class _Writer:
    """A worker's arena and its slot cursor (process state: created in the worker, never pickled)."""

    def __init__(self, token: str, slots: int) -> None:
        self.token, self.slots = token, slots
        self.arena: SlotArena | None = None
        self.sent = False  # whether a batch carrying the arena's tensors was sent
        self.generation = itertools.count()
        self.cursor = 0

    def export(self, batch: Any) -> Any:  # a WorkerBatch
        arrays: list[np.ndarray] = []
        template = _strip(batch, arrays)
        refs, end = [], 0
        for a in arrays:
            refs.append(_Ref(end, a.dtype.str, a.shape))
            end += -(-a.nbytes // _ALIGN) * _ALIGN
        if not arrays:
            return batch
        if self.arena is None or end > self.arena.slot_bytes:
            size = -(-max(end + end // 4, 1 << 16) // _ALIGN) * _ALIGN
            key = f"{self.token}:{os.getpid()}:{next(self.generation)}"
            self.arena, self.sent = SlotArena.create(key, size, self.slots), False
        flags = self.arena.flags.numpy()
        free = np.flatnonzero(flags == 0)
        if free.size == 0:
            return batch  # the rank holds every slot: through the pipe
        slot = int(free[np.searchsorted(free, self.cursor) % free.size])
        self.cursor = (slot + 1) % self.slots
        flags[slot] = 1
        for a, ref in zip(arrays, refs, strict=True):
            np.copyto(self.arena.view(slot, ref), a, casting="no")
        shared = None if self.sent else self.arena
        self.sent = True
        return SharedBatch(self.token, self.arena.key, slot, template, refs, shared)


class SharedBatchCollate:
    """A worker's collate function: ``pack`` (samples -> ``WorkerBatch``),
    then the batch's arrays into a slot.

    Args:
        pack: The worker half of the collate function (``SplitCollator.pack`` or ``numpy_batch_collate``).
        registry: The rank's registry (only its token travels to the workers).
        slots: Slots per worker (batches in flight from one worker that can use shared memory).
    """

    def __init__(self, pack: Callable[[list[Any]], Any], registry: ArenaRegistry, *, slots: int) -> None:
        self.pack, self.token, self.slots = pack, registry.token, slots
        self._writer: _Writer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_writer": None}

    def __call__(self, samples: list[Any]) -> Any:
        if self._writer is None:
            self._writer = _Writer(self.token, self.slots)
        return self._writer.export(self.pack(samples))


class SharedBatch:
    """A ``WorkerBatch`` whose arrays lie in a slot of its worker's arena (see the module note).

    In the rank, ``batch`` is the worker's ``WorkerBatch`` with views into the slot; ``to_tensors`` and
    ``pin_memory`` return its result copied out of the slot and release the slot.
    """

    def __init__(
        self, token: str, key: str, slot: int, batch: Any, refs: list[_Ref], shared: SlotArena | None
    ) -> None:
        self.token, self.key, self.slot, self.batch, self.refs, self.shared = (
            token,
            key,
            slot,
            batch,
            refs,
            shared,
        )
        self.arena: SlotArena | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.token, self.key, self.slot, self.batch, self.refs, self.shared))

    def to_tensors(self) -> Any:
        return self._convert(self.batch.to_tensors)

    def pin_memory(self) -> Any:
        return self._convert(self.batch.pin_memory)

    def _convert(self, convert: Callable[[], Any]) -> Any:
        try:
            return _copied(convert(), self.arena)
        finally:
            self.release()

    def release(self) -> None:
        """Hand the slot back to the worker (once)."""
        if self.arena is not None:
            self.arena.flags.numpy()[self.slot] = 0
            self.arena = None

    def __del__(self) -> None:
        self.release()


def _copied(out: Any, arena: SlotArena | None) -> Any:
    """``out`` with every tensor that views ``arena`` replaced by a copy (the slot is reused after this)."""
    if isinstance(out, torch.Tensor):
        # numpy's single-threaded copy: torch's clone runs its intra-op pool, which fights the workers for
        # the cores (measured: 4k samples/s instead of 70k with 2 workers on 2 cores)
        return torch.from_numpy(out.numpy().copy()) if arena is not None and arena.holds(out) else out
    if isinstance(out, dict):
        return {k: _copied(v, arena) for k, v in out.items()}
    if isinstance(out, list | tuple) and not hasattr(out, "_fields"):
        return type(out)(_copied(v, arena) for v in out)
    # e.g. a BatchGroup of converted batches
    if hasattr(out, "__dict__") and not isinstance(out, type):
        out.__dict__.update({k: _copied(v, arena) for k, v in out.__dict__.items()})
    return out


def _rebuild(token: str, key: str, slot: int, batch: Any, refs: list[_Ref], shared: SlotArena | None) -> Any:
    """Unpickling in the rank: the batch with its arrays viewing the slot."""
    registry = _REGISTRIES.get(token)
    if registry is None:
        raise RuntimeError(
            f"a shared-memory batch arrived for a loader that no longer exists (token {token})"
        )
    if shared is not None:
        registry.arenas[key] = shared
    arena = registry.arenas.get(key)
    if arena is None:
        raise RuntimeError(f"a shared-memory batch names arena {key}, which its worker never sent")
    out = SharedBatch(token, key, slot, _fill(batch, lambda i: arena.view(slot, refs[i])), refs, None)
    out.arena = arena
    return out
