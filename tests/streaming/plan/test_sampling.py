from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.plan.sampling import allocate_shards, build_units, epoch_sampling_seed, stream_choose

sizes_st = st.lists(st.integers(0, 30), min_size=1, max_size=8).filter(lambda s: sum(s) > 0)


@settings(max_examples=60, deadline=None)
@given(n=st.lists(st.integers(1, 1000), min_size=1, max_size=4), data=st.data())
def test_relative_weights_sum_to_epoch_size(n, data):
    props = data.draw(st.lists(st.floats(0.01, 5), min_size=len(n), max_size=len(n)))
    epoch = data.draw(st.one_of(st.none(), st.integers(0, 5000)))
    got = stream_choose(
        samples_per_stream=n,
        proportion=props,
        repeat=[None] * len(n),
        choose=[None] * len(n),
        epoch_size=epoch,
        seed=3,
    )
    total = sum(n) if epoch is None else epoch
    assert got.sum() == total
    p = np.array(props) / sum(props)
    assert np.all(np.abs(got - total * p) < 1 + 1e-9)


def test_absolute_weights():
    got = stream_choose(
        samples_per_stream=[10, 20, 30],
        proportion=[None] * 3,
        repeat=[2.5, None, None],
        choose=[None, 7, None],
        epoch_size=None,
        seed=0,
    )
    assert got.tolist() == [25, 7, 30]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"proportion": [0.5, None], "repeat": [None, 2]}, "mix relative"),
        ({"repeat": [1, None], "epoch_size": 5}, "epoch_size cannot"),
        ({"repeat": [-1, None]}, ">= 0"),
        ({"repeat": [1, None], "choose": [3, None]}, "at most one"),
    ],
)
def test_weight_errors(kw, msg):
    args = {
        "samples_per_stream": [10, 10],
        "proportion": [None, None],
        "repeat": [None, None],
        "choose": [None, None],
        "epoch_size": None,
        "seed": 0,
    }
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        stream_choose(**args)


@settings(max_examples=80, deadline=None)
@given(sizes=sizes_st, choose=st.integers(0, 400), g=st.integers(1, 7), seed=st.integers(0, 99))
def test_allocation_sums_and_bounds(sizes, choose, g, seed):
    alloc = allocate_shards(np.array(sizes), choose=choose, granularity=g, seed=seed)
    n = sum(sizes)
    assert alloc.sum() == choose
    lo = np.array(sizes) * (choose // n)
    assert np.all(alloc >= lo) and np.all(alloc <= lo + np.array(sizes))


@settings(max_examples=60, deadline=None)
@given(sizes=sizes_st, choose=st.integers(0, 300), seed=st.integers(0, 99))
def test_units_map_to_allocated_samples(sizes, choose, seed):
    sizes = np.array(sizes)
    alloc = allocate_shards(sizes, choose=choose, granularity=1, seed=seed)
    units = build_units(shard_sizes=sizes, alloc=alloc, seed=seed)
    assert units.num_samples == choose
    ids = units.to_sample_ids(np.arange(choose))
    base = np.concatenate([[0], np.cumsum(sizes)])
    counts = collections.Counter(ids.tolist())
    for s, m in enumerate(sizes):
        per = [counts.get(i, 0) for i in range(base[s], base[s] + m)]
        assert sum(per) == alloc[s]
        if m:  # every sample of a shard appears floor or ceil times (partial repeats are without replacement)
            assert max(per) - min(per) <= 1


def test_fixed_sampling_reuses_the_subset_and_balanced_changes_it():
    assert epoch_sampling_seed(seed=5, epoch=3, sampling_method="fixed", shuffle=True) == 5
    assert epoch_sampling_seed(seed=5, epoch=3, sampling_method="balanced", shuffle=True) == 8
    sizes = np.array([100, 100])
    a0 = build_units(
        shard_sizes=sizes, alloc=allocate_shards(sizes, choose=50, granularity=1, seed=5), seed=5
    )
    a1 = build_units(
        shard_sizes=sizes, alloc=allocate_shards(sizes, choose=50, granularity=1, seed=6), seed=6
    )
    s0, s1 = set(a0.to_sample_ids(np.arange(50)).tolist()), set(a1.to_sample_ids(np.arange(50)).tolist())
    assert s0 != s1


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=8), data=st.data())
def test_granularity_of_a_whole_shard_concentrates_the_remainder(sizes, data):
    sizes = np.array(sizes)
    rem = data.draw(st.integers(1, int(sizes.sum()) - 1))
    alloc = allocate_shards(
        sizes, choose=rem, granularity=int(sizes.max()), seed=data.draw(st.integers(0, 9))
    )
    partial = (alloc > 0) & (alloc < sizes)
    assert alloc.sum() == rem and partial.sum() <= 1  # whole shards, plus at most one cut
