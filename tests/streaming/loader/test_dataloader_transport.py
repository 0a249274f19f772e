"""Worker -> rank transport of `StreamingDataLoader`: `WorkerBatch` / `SplitCollator` halves, and pinning.

No GPU here: pinning is observed by patching `torch.Tensor.pin_memory` (it tags the copy it returns) and
making torch believe an accelerator exists, so DataLoader starts its real pin-memory thread.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from streaming.loader.dataloader import NumpyBatch, SplitCollator, StreamingDataLoader, WorkerBatch
from streaming.reader.dataset import StreamingDataset
from tests.streaming.reader.test_dataset import write_ids


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_ids(tmp_path_factory.mktemp("transport") / "a", 0, 48)


def make(path):
    return StreamingDataset(local=path, batch_size=4, shuffle=True, num_canonical_nodes=2)


def _pinned(batch):
    return {k: getattr(v, "_test_pinned", False) for k, v in batch.items() if isinstance(v, torch.Tensor)}


class _Halves(WorkerBatch):
    def __init__(self, ids: np.ndarray, packed_in: int) -> None:
        self.ids, self.packed_in = ids, packed_in

    def to_tensors(self):
        return {
            "id": torch.from_numpy(self.ids.astype(np.int64) * 10),
            "packed_in": torch.tensor([self.packed_in]),
            "finished_in": torch.tensor([os.getpid()]),
        }


class _Split(SplitCollator):
    def pack(self, samples):
        return _Halves(np.array([s["id"] for s in samples], dtype=np.int16), os.getpid())


def test_default_numpy_transport_is_pinned_when_asked(data, fake_accelerator):
    # numpy arrays have no pin_memory(): before WorkerBatch, torch's pin thread passed them through unpinned
    plain = [b["id"].tolist() for b in StreamingDataLoader(make(data), batch_size=4)]
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2, pin_memory=True)
    got = list(loader)
    assert [b["id"].tolist() for b in got] == plain
    assert all(all(_pinned(b).values()) for b in got)


def test_without_pin_memory_nothing_is_pinned(data, fake_accelerator):
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    assert not any(any(_pinned(b).values()) for b in loader)


@pytest.mark.parametrize("pin", [False, True])
def test_split_collator_packs_in_workers_and_finishes_in_the_rank(data, fake_accelerator, pin):
    plain = [b["id"].tolist() for b in StreamingDataLoader(make(data), batch_size=4)]
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2, collate_fn=_Split(), pin_memory=pin)
    got = list(loader)
    assert [[i // 10 for i in b["id"].tolist()] for b in got] == plain
    assert all(int(b["packed_in"]) != os.getpid() and int(b["finished_in"]) == os.getpid() for b in got)
    assert all(all(_pinned(b).values()) == pin for b in got)
    assert loader.state_dict()["sample_in_epoch"] == len(plain) * 4


def test_split_collator_in_process_does_both_halves(data, fake_accelerator):
    got = list(StreamingDataLoader(make(data), batch_size=4, collate_fn=_Split(), pin_memory=True))
    assert all(int(b["packed_in"]) == int(b["finished_in"]) == os.getpid() for b in got)
    assert all(all(_pinned(b).values()) for b in got)


def test_numpy_batch_pins_nested_tensors(fake_accelerator):
    batch = NumpyBatch({"a": np.arange(3), "b": [np.ones(2)], "c": "text"}).pin_memory()
    assert batch["a"]._test_pinned and batch["b"][0]._test_pinned and batch["c"] == "text"
