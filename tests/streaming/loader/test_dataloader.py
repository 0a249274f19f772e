from __future__ import annotations

import json
import os
import textwrap

import pytest

from streaming.loader.dataloader import StreamingDataLoader
from streaming.reader.dataset import StreamingDataset
from tests.dist_launch import run_ranks
from tests.streaming.reader.test_dataset import write_ids


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_ids(tmp_path_factory.mktemp("dl") / "a", 0, 203)


def batches(loader, limit=None):
    out = []
    for b in loader:
        out.append(b["id"].tolist())
        if limit is not None and len(out) == limit:
            break
    return out


def make(path, **kw):
    return StreamingDataset(local=path, batch_size=4, shuffle=True, num_canonical_nodes=2, **kw)


def test_batch_size_must_match(data):
    with pytest.raises(ValueError, match="differs from StreamingDataset batch_size"):
        StreamingDataLoader(make(data), batch_size=8)
    loader = StreamingDataLoader(
        StreamingDataset(local=data), batch_size=4
    )  # refused when iterated, as upstream
    with pytest.raises(ValueError, match="^Please pass `batch_size` to StreamingDataset"):
        next(iter(loader))


def test_workers_do_not_change_the_order_and_epochs_advance(data):
    ref = StreamingDataLoader(make(data), batch_size=4)
    e0, e1 = batches(ref), batches(ref)
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    assert batches(loader) == e0
    assert batches(loader) == e1 and e0 != e1
    assert sum(len(b) for b in e0) == len(make(data))
    persistent = StreamingDataLoader(make(data), batch_size=4, num_workers=2, persistent_workers=True)
    assert batches(persistent) == e0 and batches(persistent) == e1
    assert persistent.state_dict()["epoch"] == 1


def test_resume_mid_epoch_with_workers(data):
    full = batches(StreamingDataLoader(make(data), batch_size=4))
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    head = batches(loader, limit=7)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["sample_in_epoch"] == 28 and state["epoch"] == 0
    resumed = StreamingDataLoader(make(data), batch_size=4, num_workers=2)
    resumed.load_state_dict(state)
    rest = batches(resumed)
    assert head + rest == full
    # a second resume in the same epoch counts from the resumed offset
    again = StreamingDataLoader(make(data), batch_size=4)
    again.load_state_dict(state)
    batches(again, limit=3)
    assert again.state_dict()["sample_in_epoch"] == 28 + 12


_SCRIPT = """
import json, sys
import torch.distributed as dist
from streaming.loader.dataloader import StreamingDataLoader
from streaming.reader.dataset import StreamingDataset
from tests.dist_launch import run_ranks

path, out, phase, state_path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo")
ds = StreamingDataset(local=path, batch_size=3, shuffle=True, num_canonical_nodes=2)
loader = StreamingDataLoader(ds, batch_size=3, num_workers=2)
got, state = [], None
if phase == "resume":
    loader.load_state_dict(json.load(open(state_path)))
for k, b in enumerate(loader):
    got.append(b["id"].tolist())
    if phase == "first" and k == 4:
        state = loader.state_dict()
everyone = [None] * dist.get_world_size()
dist.all_gather_object(everyone, got)
if dist.get_rank() == 0:
    json.dump({"batches": everyone, "state": state, "len": len(ds)}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.dist
def test_torchrun_two_ranks_two_workers_match_one_process(data, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = {"PYTHONPATH": os.pathsep.join([os.path.abspath("src"), os.environ.get("PYTHONPATH", "")])}

    def torchrun(phase, out):
        run_ranks(script, data, out, phase, tmp_path / "state.json", nproc=2, env=env)
        return json.loads(out.read_text())

    first = torchrun("first", tmp_path / "first.json")
    ranks = first["batches"]
    assert len(ranks[0]) == len(ranks[1])
    single = batches(
        StreamingDataLoader(
            StreamingDataset(local=data, batch_size=6, shuffle=True, num_canonical_nodes=2), batch_size=6
        )
    )
    assert [sorted(a + b) for a, b in zip(*ranks)][:-1] == [sorted(x) for x in single][:-1]
    assert sum(len(b) for b in ranks[0]) == first["len"]
    state = first["state"]
    assert state["sample_in_epoch"] == 5 * 6 and state["global_batch_size"] == 6
    (tmp_path / "state.json").write_text(json.dumps(state))
    resumed = torchrun("resume", tmp_path / "resume.json")["batches"]
    assert resumed[0] == ranks[0][5:] and resumed[1] == ranks[1][5:]


def test_numpy_transport_matches_default_collate():
    import numpy as np
    import torch
    from torch.utils.data import default_collate

    from streaming.loader.dataloader import numpy_collate, to_tensors

    samples = [
        {
            "tokens": np.arange(4, dtype=np.int32) + i,
            "id": i,
            "f": 0.5 * i,
            "u": np.uint16(i),
            "text": f"t{i}",
            "flag": bool(i % 2),
        }
        for i in range(3)
    ]
    ours, ref = to_tensors(numpy_collate(samples)), default_collate(samples)
    assert ours.keys() == ref.keys()
    for key in ref:
        if isinstance(ref[key], torch.Tensor):
            assert ours[key].dtype == ref[key].dtype and torch.equal(ours[key], ref[key]), key
        else:
            assert ours[key] == ref[key], key


@pytest.mark.parametrize("workers", [0, 2])
def test_iterating_never_draws_from_the_global_rng(data, workers):
    """A resumed run creates iterators at other points of the random stream: they must not consume it."""
    import torch

    torch.manual_seed(5)
    before = torch.get_rng_state()
    loader = StreamingDataLoader(make(data), batch_size=4, num_workers=workers)
    batches(loader, limit=3)
    batches(loader)
    assert torch.equal(torch.get_rng_state(), before)


def test_worker_seeds_depend_on_the_seed_and_epoch_only(data):
    from streaming.loader.dataloader import iteration_seed

    loader = StreamingDataLoader(make(data, shuffle_seed=3), batch_size=4)
    batches(loader, limit=2)
    state = loader.state_dict()
    assert loader.generator.initial_seed() == iteration_seed(3, 0)
    resumed = StreamingDataLoader(make(data, shuffle_seed=3), batch_size=4)
    resumed.load_state_dict(state)
    batches(resumed, limit=1)
    assert resumed.generator.initial_seed() == iteration_seed(3, 0)
    batches(resumed)
    assert resumed.generator.initial_seed() == iteration_seed(3, 1) != iteration_seed(3, 0)


class _FreezeCount(__import__("torch").utils.data.IterableDataset):
    """Yields, in each worker, how many objects the collector holds frozen there."""

    def __iter__(self):
        import gc

        yield [gc.get_freeze_count()]


@pytest.mark.parametrize("context", [None, "fork", "spawn"])
def test_forked_workers_start_on_a_frozen_heap(context):
    """A worker's collections must not walk (and so copy) the parent's heap: forked workers inherit it frozen
    (at 8 workers on 2 cores the copying was half of each worker's CPU before its first sample); the parent's
    collector is as before once they have started, and spawned workers start fresh."""
    import gc

    from streaming.loader.dataloader import same

    loader = StreamingDataLoader(
        _FreezeCount(), batch_size=None, collate_fn=same, num_workers=2, multiprocessing_context=context
    )
    counts = [int(x[0]) for x in loader]
    assert gc.get_freeze_count() == 0
    if context == "spawn":
        assert counts == [0, 0]
    else:
        assert len(counts) == 2 and min(counts) > 10_000  # torch's objects, among others
