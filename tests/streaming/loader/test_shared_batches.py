"""Shared-memory slots for worker batches (`streaming.loader.shared_batches`): real worker processes, real
pickling.

The unit tests pickle through `ForkingPickler` (what DataLoader's queues use: torch shares the arena's memory)
in one process; the loader tests run 2 worker processes and compare against the in-process batches.
"""

from __future__ import annotations

import gc
import io
import os
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.multiprocessing

from streaming.loader.dataloader import NumpyBatch, SplitCollator, StreamingDataLoader, WorkerBatch
from streaming.loader.shared_batches import ArenaRegistry, SharedBatch, SharedBatchCollate
from streaming.reader.dataset import StreamingDataset
from tests.streaming.reader.test_dataset import write_ids


def send(obj):
    """Pickled and unpickled as a DataLoader queue does (torch tensors share memory)."""
    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
    return pickle.loads(buf.getvalue())


class _Rows(WorkerBatch):
    def __init__(self, ids: np.ndarray, note: str) -> None:
        self.ids, self.note = ids, note

    def to_tensors(self):
        return {"ids": torch.from_numpy(self.ids.astype(np.int64)), "note": self.note}


def _collate(registry, slots=3):
    return SharedBatchCollate(lambda samples: NumpyBatch({"x": np.stack(samples)}), registry, slots=slots)


def test_arrays_cross_in_a_slot_and_the_slot_is_released():
    registry = ArenaRegistry()
    collate = _collate(registry)
    rows = [np.arange(i, i + 5, dtype=np.int32) for i in range(4)]
    sent = collate(rows)
    assert isinstance(sent, SharedBatch) and sent.shared is not None  # the first batch carries the arena
    got = send(sent)
    arena = registry.arenas[sent.key]
    assert arena.flags.tolist().count(1) == 1
    x = got.to_tensors()["x"]
    assert x.tolist() == np.stack(rows).tolist() and x.dtype == torch.int32
    assert arena.flags.tolist().count(1) == 0  # released after the copy
    assert not arena.holds(x)  # NumpyBatch's zero-copy tensors are copied out of the slot
    second = collate(rows[:2])
    assert second.shared is None and second.key == sent.key  # later batches name the arena only
    assert send(second).to_tensors()["x"].tolist() == np.stack(rows[:2]).tolist()


def test_other_fields_and_objects_travel_unchanged():
    registry = ArenaRegistry()
    collate = SharedBatchCollate(lambda s: _Rows(np.asarray(s, dtype=np.uint16), "hello"), registry, slots=2)
    out = send(collate([3, 1, 2])).to_tensors()
    assert out == {"ids": out["ids"], "note": "hello"} and out["ids"].tolist() == [3, 1, 2]


def test_without_a_free_slot_the_batch_goes_through_the_pipe():
    registry = ArenaRegistry()
    collate = _collate(registry, slots=2)
    rows = [np.zeros(3, dtype=np.int64)]
    held = [send(collate(rows)), send(collate(rows))]  # unconverted: both slots in use
    third = collate(rows)
    assert isinstance(third, NumpyBatch)
    held[0].release()
    assert isinstance(collate(rows), SharedBatch)


def test_a_discarded_batch_releases_its_slot():
    registry = ArenaRegistry()
    collate = _collate(registry, slots=2)
    got = send(collate([np.ones(4)]))
    arena = registry.arenas[got.key]
    assert arena.flags.tolist() == [1, 0]
    del got
    gc.collect()
    assert arena.flags.tolist() == [0, 0]


def test_a_larger_batch_gets_a_new_arena():
    registry = ArenaRegistry()
    collate = _collate(registry)
    small = send(collate([np.zeros(8, dtype=np.int8)]))
    big = collate([np.arange(100_000, dtype=np.int64)] * 2)
    assert big.key != small.key and big.shared is not None
    assert send(big).to_tensors()["x"][1, -1] == 99_999
    assert small.to_tensors()["x"].tolist() == [[0] * 8]  # the old arena stays valid for batches in flight


def test_registry_forgets_arenas_of_exited_workers():
    registry = ArenaRegistry()
    send(_collate(registry)([np.ones(2)])).release()
    key = next(iter(registry.arenas))
    registry.drop_exited()
    assert key in registry.arenas  # this process (the "worker" here) is alive
    registry.arenas[key.replace(f":{os.getpid()}:", ":999999999:")] = registry.arenas.pop(key)
    registry.drop_exited()
    assert not registry.arenas


# ----- through a StreamingDataLoader with worker processes -----


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_ids(tmp_path_factory.mktemp("shared") / "a", 0, 60)


def make(path):
    return StreamingDataset(local=path, batch_size=4, shuffle=True, num_canonical_nodes=2)


class _Split(SplitCollator):
    def pack(self, samples):
        return _Rows(np.array([s["id"] for s in samples], dtype=np.int16), "packed")


@pytest.mark.parametrize("collate", [None, _Split()])
def test_loader_batches_cross_in_shared_memory_and_equal_in_process(data, collate):
    kwargs = {} if collate is None else {"collate_fn": collate}
    key = "id" if collate is None else "ids"
    in_process = StreamingDataLoader(make(data), batch_size=4, **kwargs)
    epochs = [[b[key].tolist() for b in in_process] for _ in range(2)]
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2, persistent_workers=True, **kwargs)
    for plain in epochs:  # the second epoch reuses the persistent workers' arenas
        assert [b[key].tolist() for b in loader] == plain
        assert loader.state_dict()["sample_in_epoch"] == 60
    assert len(loader._arenas.arenas) == 2  # one per worker, sent once
    flags = [a.flags.tolist() for a in loader._arenas.arenas.values()]
    assert all(f.count(1) == 0 for f in flags)  # every slot handed back


def test_other_collate_functions_are_used_as_given(data):
    loader = StreamingDataLoader(
        make(data), batch_size=4, num_workers=2, collate_fn=lambda s: [x["id"] for x in s]
    )
    assert sorted(i for b in loader for i in b) == list(range(60))
    assert not loader._arenas.arenas
