"""Grouped worker batches (`streaming.loader.batch_groups`): the global batch order survives any grouping and
arrival.

`interleave` is checked as a pure function against arbitrary item sizes and arrival orders (hypothesis); the
loader tests run real worker processes and compare with the in-process batches, including partial final
batches, mid-group resumption and out-of-order delivery.
"""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.loader.batch_groups import BatchGroup, interleave
from streaming.loader.dataloader import StreamingDataLoader
from streaming.plan.partition import worker_batches
from streaming.reader.dataset import StreamingDataset
from tests.streaming.reader.test_dataset import write_ids


@settings(max_examples=200, deadline=None)
@given(
    batches=st.integers(0, 40),
    workers=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_interleave_restores_the_global_order(batches, workers, sizes, seed):
    # each worker's batches (worker_batches: w, w + W, ...) cut into items of varying sizes
    items = {w: [] for w in range(workers)}
    for w in range(workers):
        mine = list(worker_batches(num_samples=batches, batch_size=1, num_workers=workers, worker=w))
        at, k = 0, 0
        while at < len(mine):
            n = sizes[(w + k) % len(sizes)]
            items[w].append(BatchGroup(w, mine[at : at + n]))
            at, k = at + n, k + 1
    # arrival: any merge that keeps each worker's items in order
    rng, queues, arrival = random.Random(seed), {w: list(v) for w, v in items.items()}, []
    while any(queues.values()):
        w = rng.choice([w for w, q in queues.items() if q])
        arrival.append(queues[w].pop(0))
    assert list(interleave(arrival, workers)) == list(range(batches))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_ids(tmp_path_factory.mktemp("groups") / "a", 0, 93)


def make(path, batch_size=4):
    return StreamingDataset(local=path, batch_size=batch_size, shuffle=True, num_canonical_nodes=2)


def ids(loader):
    return [b["id"].tolist() for b in loader]


@pytest.mark.parametrize(("workers", "drop_last"), [(1, False), (2, True), (3, False), (3, True)])
def test_grouped_workers_yield_the_in_process_batches(data, workers, drop_last):
    plain = ids(StreamingDataLoader(make(data), batch_size=4, drop_last=drop_last))
    assert (len(plain[-1]) == 4) == drop_last  # 93 samples: a partial last batch unless dropped
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=workers, drop_last=drop_last)
    assert loader._grouped is not None
    assert ids(loader) == plain


def _mark(folder: str, worker_id: int) -> None:
    (Path(folder) / f"w{worker_id}").touch()


def test_a_worker_init_fn_set_after_construction_runs_in_the_workers(data, tmp_path):
    # what foundry's preemption handling does (shield_workers): the grouped loader's workers must run it
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    loader.worker_init_fn = partial(_mark, str(tmp_path))
    assert len(ids(loader)) == 24
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w0", "w1"]


def test_out_of_order_delivery_keeps_the_order(data):
    plain = ids(StreamingDataLoader(make(data), batch_size=4))
    assert ids(StreamingDataLoader(make(data), batch_size=4, num_workers=3, in_order=False)) == plain


@pytest.mark.parametrize("stop", [1, 2, 7])
def test_resume_inside_a_group_is_exact(data, stop):
    full = ids(StreamingDataLoader(make(data), batch_size=4))
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=3)
    seen = []
    for batch in loader:
        seen.append(batch["id"].tolist())
        if len(seen) == stop:
            break
    state = loader.state_dict()
    assert state["sample_in_epoch"] == 4 * stop  # the batches yielded, not the ones buffered
    resumed = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    resumed.load_state_dict(state)
    assert seen + ids(resumed) == full


@pytest.mark.slow
def test_spawned_workers_yield_the_in_process_batches(data):
    # spawn pickles GroupedBatches, the collate and the dataset into fresh interpreters (~5 s of imports)
    plain = ids(StreamingDataLoader(make(data), batch_size=4))
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert ids(loader) == plain
