"""Properties of ``batching_method='device_per_stream'`` (issue 28 item 6); upstream's exact orders are checked in
``tests/streaming/compat/test_device_per_stream_reference.py``."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.plan import PlanSpec, epoch_order, epoch_units
from streaming.plan.device_per_stream import pad_column
from streaming.reader.epoch_planner import EpochPlanner
from streaming.reader.world import World
from tests.streaming.plan.helpers import device_batches

WORLDS = [
    (1, 1, 1),
    (1, 2, 2),
    (2, 2, 1),
    (2, 1, 2),
    (1, 4, 1),
    (4, 1, 1),
]  # (nodes, ranks per node, workers)


@st.composite
def cases(draw):
    nodes, ranks, workers = draw(st.sampled_from(WORLDS))
    b = draw(st.integers(1, 4))
    n_streams = draw(st.integers(1, 3))
    shards = [draw(st.lists(st.integers(1, 30), min_size=1, max_size=5)) for _ in range(n_streams)]
    c = nodes * draw(st.integers(1, 3))
    choose = [draw(st.integers(c * ranks * b, 150)) for _ in range(n_streams)]  # >= 1 batch per node
    spec = PlanSpec(
        shard_sizes=tuple(x for s in shards for x in s),
        shards_per_stream=tuple(len(s) for s in shards),
        choose_per_stream=tuple(choose),
        num_canonical_nodes=c,
        global_batch_size=b * nodes * ranks,
        shuffle=draw(st.booleans()),
        shuffle_algo=draw(st.sampled_from(["naive", "py1s", "py2s", "py1br", "py1e"])),
        shuffle_seed=draw(st.integers(0, 1000)),
        shuffle_block_size=draw(st.integers(2, 60)),
        sampling_method=draw(st.sampled_from(["balanced", "fixed"])),
        batching_method="device_per_stream",
        world_shape=(nodes, ranks),
        upstream_order=draw(st.booleans()),
    )
    if spec.upstream_order and spec.shuffle_algo not in ("naive", "py1s", "py1e"):
        spec = PlanSpec(**{**spec.__dict__, "upstream_order": False})
    return spec, (nodes, ranks, workers, b)


def _order(spec, epoch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoch_order(spec, epoch)


def _all_devices(order, world, drop=0):
    nodes, ranks, workers, b = world
    return [
        device_batches(order, drop=drop, P=nodes, R=ranks, W=workers, B=b, d=d) for d in range(nodes * ranks)
    ]


def _stream_of(spec, ids):
    ends = np.cumsum(spec.shard_sizes)
    stream_of_shard = np.repeat(np.arange(len(spec.shards_per_stream)), spec.shards_per_stream)
    return stream_of_shard[np.searchsorted(ends, ids, side="right")]


@settings(max_examples=40, deadline=None)
@given(case=cases(), epoch=st.integers(0, 3))
def test_every_device_batch_is_one_streams_and_devices_get_equal_full_batches(case, epoch):
    spec, world = case
    order = _order(spec, epoch)
    devices = _all_devices(order, world)
    assert len({len(d) for d in devices}) == 1
    for batches in devices:
        for batch in batches:
            assert len(batch) == world[3]
            assert len(set(_stream_of(spec, batch).tolist())) == 1


@settings(max_examples=40, deadline=None)
@given(case=cases(), epoch=st.integers(0, 3))
def test_no_sample_repeats_beyond_the_chosen_ones_and_upstreams_padding(case, epoch):
    spec, (nodes, ranks, _, _) = case
    order = _order(spec, epoch)
    ids = order.sample_ids(np.arange(len(order)))
    units = epoch_units(spec, epoch)
    chosen = collections.Counter(units.to_sample_ids(np.arange(units.num_samples)).tolist())
    extra = collections.Counter(ids.tolist()) - chosen
    c = spec.num_canonical_nodes
    for s in range(len(spec.choose_per_stream)):  # short canonical rows repeat 1, rank padding < R per row
        repeats = sum(v for k, v in extra.items() if _stream_of(spec, np.array([k]))[0] == s)
        assert repeats <= c * ranks
    divisible = all(x % (c * ranks) == 0 for x in spec.choose_per_stream)
    if divisible:
        assert not extra, "no padding needed: every sample at most as often as chosen"


@settings(max_examples=40, deadline=None)
@given(case=cases(), epoch=st.integers(0, 2), data=st.data())
def test_resuming_continues_each_device_at_its_next_batch(case, epoch, data):
    spec, world = case
    order = _order(spec, epoch)
    g = spec.global_batch_size
    k = data.draw(st.integers(0, len(order) // g))
    extra = data.draw(st.integers(0, g - 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = order.start(k * g + extra)
    assert start == k * g
    full, resumed = _all_devices(order, world), _all_devices(order, world, drop=start)
    for a, b in zip(full, resumed):
        assert [x.tolist() for x in a[k:]] == [x.tolist() for x in b]


@settings(max_examples=20, deadline=None)
@given(case=cases(), epoch=st.integers(0, 2))
def test_the_order_is_a_pure_function_of_spec_and_epoch(case, epoch):
    spec, _ = case
    a, b = _order(spec, epoch), _order(spec, epoch)
    assert np.array_equal(a.sample_ids(np.arange(len(a))), b.sample_ids(np.arange(len(b))))


def test_pad_column_repeats_earlier_columns_as_upstream():
    # a row of 5 padded to 8 (R = 4, 3 missing): upstream appends columns 5 - 4 - 3 + 1 = -1 ... -> tile branch
    assert pad_column(np.arange(8), 5, 4).tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    # a row of 9 padded to 12 (R = 4): repeats columns 3, 4, 5
    assert pad_column(np.arange(12), 9, 4).tolist() == list(range(9)) + [3, 4, 5]


def test_refusals_name_the_cause():
    base = dict(shard_sizes=(40, 8), shards_per_stream=(1, 1), choose_per_stream=(40, 8), global_batch_size=8)
    with pytest.raises(ValueError, match="world shape"):
        PlanSpec(**base, num_canonical_nodes=2, batching_method="device_per_stream")
    spec = PlanSpec(**base, num_canonical_nodes=3, batching_method="device_per_stream", world_shape=(2, 1))
    with pytest.raises(ValueError, match="multiple of the number of nodes"):
        epoch_order(spec, 0)
    spec = PlanSpec(**base, num_canonical_nodes=2, batching_method="device_per_stream", world_shape=(1, 1))
    with pytest.raises(
        ValueError, match="stream 1 gives each node 8 samples this epoch, fewer than one device"
    ):
        epoch_order(PlanSpec(**{**spec.__dict__, "global_batch_size": 9}), 0)


def test_the_planner_passes_its_world_and_resumes_at_a_global_batch_boundary():
    args = dict(
        shard_sizes=(40, 30),
        shards_per_stream=(1, 1),
        choose_per_stream=(40, 30),
        shuffle=False,
        shuffle_algo="py1e",
        shuffle_seed=1,
        shuffle_block_size=None,
        sampling_method="balanced",
        sampling_granularity=1,
        batching_method="device_per_stream",
    )
    plan = EpochPlanner(spec_args=args, batch_size=2, partition_algo="orig", ncn_arg=2, replication=None)
    plan.world = World(num_nodes=2, ranks_per_node=2, rank=3)
    assert plan.spec().world_shape == (2, 2)
    plan.epoch, plan.drop = 0, 8 * 2 + 5
    with pytest.warns(UserWarning, match="rounds down to 16"):
        assert plan.next() == (0, 16)
