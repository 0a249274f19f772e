from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.plan.partition import CanonicalOrder, DeviceSlice, check_partition, worker_batches


@settings(max_examples=100, deadline=None)
@given(e=st.integers(1, 300), c=st.integers(1, 12))
def test_canonical_order_covers_every_position_and_repeats_only_row_tails(e, c):
    if e < c:
        with pytest.raises(ValueError, match="fewer than num_canonical_nodes"):
            CanonicalOrder(e, c)
        return
    co = CanonicalOrder(e, c)
    pos = co.positions(np.arange(len(co)))
    assert set(pos.tolist()) == set(range(e))
    assert len(co) - e < c  # at most one repeat per row
    rows, j = co.locate(np.arange(len(co)))
    for r in range(c):  # each row is its own contiguous range, in order
        p = pos[rows == r]
        assert p[0] == r * e // c and np.all(np.diff(p) >= 0)


def test_worked_example_from_the_spec():
    co = CanonicalOrder(10, 2)
    assert co.positions(np.arange(10)).tolist() == [0, 5, 1, 6, 2, 7, 3, 8, 4, 9]


@settings(max_examples=100, deadline=None)
@given(total=st.integers(1, 200), t=st.integers(1, 9))
def test_devices_cover_the_order_with_equal_counts(total, t):
    got = []
    for d in range(t):
        ds = DeviceSlice(total=total, num_devices=t, device=d)
        got.extend(ds.global_index(np.arange(ds.num_samples)).tolist())
    c = collections.Counter(got)
    assert set(c) == set(range(total))
    assert len(got) == t * -(-total // t)
    assert len(got) - total < t


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 100), b=st.integers(1, 9), w=st.integers(1, 4))
def test_worker_batches_partition_device_batches(n, b, w):
    all_b = sorted(
        j for k in range(w) for j in worker_batches(num_samples=n, batch_size=b, num_workers=w, worker=k)
    )
    assert all_b == list(range(-(-n // b)))


def test_orig_needs_divisibility_relaxed_does_not():
    check_partition(partition_algo="orig", num_canonical_nodes=4, num_physical_nodes=2)
    check_partition(partition_algo="relaxed", num_canonical_nodes=4, num_physical_nodes=3)
    with pytest.raises(ValueError, match="divide"):
        check_partition(partition_algo="orig", num_canonical_nodes=4, num_physical_nodes=3)
    with pytest.raises(ValueError, match="partition_algo"):
        check_partition(partition_algo="bogus", num_canonical_nodes=4, num_physical_nodes=3)
