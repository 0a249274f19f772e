from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.plan.counter_rng import derive_key, hash64, permute, uniform


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=8),
    key=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_permute_is_a_bijection_of_each_group(sizes, key, data):
    keys = hash64(key, np.arange(len(sizes)))
    x = np.concatenate([np.arange(n) for n in sizes])
    group = np.repeat(np.arange(len(sizes)), sizes)
    got = permute(x, group, keys, np.array(sizes))
    for g, n in enumerate(sizes):
        assert sorted(got[group == g].tolist()) == list(range(n))
    # pointwise: any subset, in any order, gives the same values
    sel = np.array(data.draw(st.lists(st.integers(0, len(x) - 1), max_size=30)), dtype=np.int64)
    assert np.array_equal(permute(x[sel], group[sel], keys, np.array(sizes)), got[sel])


def test_permute_depends_on_the_key_and_looks_random():
    n = 1000
    a = permute(np.arange(n), np.zeros(n, dtype=np.int64), np.array([1], dtype=np.uint64), np.array([n]))
    b = permute(np.arange(n), np.zeros(n, dtype=np.int64), np.array([2], dtype=np.uint64), np.array([n]))
    assert not np.array_equal(a, b)
    assert abs(np.corrcoef(a, np.arange(n))[0, 1]) < 0.1
    assert np.count_nonzero(a == np.arange(n)) < 10  # ~1 fixed point expected
    # over many keys, where element 0 goes is about uniform over [0, 10)
    keys = hash64(7, np.arange(20000))
    first = permute(np.zeros(20000, dtype=np.int64), np.arange(20000), keys, np.full(20000, 10))
    counts = np.bincount(first, minlength=10)
    assert counts.min() > 1700 and counts.max() < 2300


def test_uniform_and_keys():
    u = uniform(derive_key(1, 2, 3), np.arange(100000))
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01
    hist = np.histogram(u, bins=20, range=(0, 1))[0]
    assert hist.min() > 4500 and hist.max() < 5500
    # element i does not depend on which other elements are asked for
    assert np.array_equal(uniform(derive_key(1, 2, 3), np.array([5, 99999])), u[[5, 99999]])
    keys = {derive_key(s, e, t) for s in range(5) for e in range(5) for t in range(5)}
    assert len(keys) == 125 and derive_key(1, 2) != derive_key(2, 1)
