from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.plan.partition import CanonicalOrder
from streaming.plan.py1e import ExpandingShuffle
from streaming.plan.shuffle import SHUFFLE_ALGOS, make_shuffle

ALGOS = [None, *SHUFFLE_ALGOS]


def _setup(sizes, c, algo, *, seed=7, epoch=1, bs=20, window=None):
    sizes = np.asarray(sizes, dtype=np.int64)
    e = int(sizes.sum())
    co = CanonicalOrder(e, c)
    rows = np.arange(c + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sh = make_shuffle(
            algo=algo,
            unit_sizes=sizes,
            row_start=co.row_start(rows),
            num_canonical_nodes=c,
            seed=seed,
            epoch=epoch,
            block_size=bs,
            window=window,
        )
    node = np.repeat(np.arange(c), co.row_len(np.arange(c)))
    j = np.concatenate([np.arange(n) for n in co.row_len(np.arange(c))])
    return sh, node, j, e


case = st.tuples(
    st.lists(st.integers(1, 40), min_size=1, max_size=10),
    st.integers(1, 4),
    st.sampled_from(ALGOS),
    st.integers(1, 50),
    st.integers(1, 30),
).filter(lambda t: sum(t[0]) >= t[1])


@settings(max_examples=120, deadline=None)
@given(case)
def test_every_shuffle_is_a_permutation_and_lookup_is_order_free(t):
    sizes, c, algo, bs, window = t
    sh, node, j, e = _setup(sizes, c, algo, bs=bs, window=window)
    big = sh.lookup(node, j)
    assert sorted(big.tolist()) == list(range(e))
    perm = np.random.default_rng(0).permutation(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sh2, *_ = _setup(sizes, c, algo, bs=bs, window=window)
        assert np.array_equal(sh2.lookup(node[perm], j[perm]), big[perm])


@settings(max_examples=80, deadline=None)
@given(case.filter(lambda t: t[2] not in (None, "naive")))
def test_locality_each_node_reads_only_its_own_spans(t):
    sizes, c, algo, bs, window = t
    sh, node, j, e = _setup(sizes, c, algo, bs=bs, window=window)
    big = sh.lookup(node, j)
    sp = sh.spans
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for cc in range(c):
        ks = range(int(sp.node_ptr[cc]), int(sp.node_ptr[cc + 1]))
        got = big[node == cc]
        if algo == "py2s":  # samples are pre-shuffled inside each unit: locality is per unit (shard)
            units = np.searchsorted(offsets, got, side="right") - 1
            want = {int(sp.unit[k]) for k in ks}
            assert set(units.tolist()) == want
            for u in want:
                assert np.count_nonzero(units == u) == sum(int(sp.length[k]) for k in ks if sp.unit[k] == u)
        else:
            mine = set()
            for k in ks:
                mine.update(range(int(sp.big_start[k]), int(sp.big_start[k] + sp.length[k])))
            assert set(got.tolist()) == mine
        # and each node's pieces number at most (units + 1): contiguous spans of the unit order
        assert sp.node_ptr[cc + 1] - sp.node_ptr[cc] <= len(sizes) + 1


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    bs=st.integers(2, 40),
    window=st.integers(1, 25),
)
def test_py1e_windows_equal_one_global_sort(sizes, bs, window):
    """The windowed evaluation is exactly 'sort the node by key' (the algorithm's definition)."""
    sh, node, j, e = _setup(sizes, 1, "py1e", bs=bs, window=window)
    assert isinstance(sh, ExpandingShuffle)
    bigs, keys = [], []
    sp = sh.spans
    for k in range(int(sp.node_ptr[0]), int(sp.node_ptr[1])):
        b, x = sh._make_span_keys(0, k)
        bigs.append(b)
        keys.append(x)
    bigs, keys = np.concatenate(bigs), np.concatenate(keys)
    want = bigs[np.lexsort((np.arange(len(keys)), keys))]
    assert np.array_equal(sh.lookup(node, j), want)
    # each sample moves at most the expansion reach from its layout index
    layout = np.empty(e, dtype=np.int64)
    layout[bigs] = np.arange(e)
    got = sh.lookup(node, j)
    assert np.all(np.abs(layout[got] - np.arange(e)) <= 2 * sh.reach)


def test_shuffles_depend_on_seed_and_epoch():
    sizes = [50] * 8
    for algo in SHUFFLE_ALGOS:
        a = _setup(sizes, 2, algo, seed=1, epoch=0, bs=100)
        b = _setup(sizes, 2, algo, seed=1, epoch=1, bs=100)
        c = _setup(sizes, 2, algo, seed=2, epoch=0, bs=100)
        ra, rb, rc = (x[0].lookup(x[1], x[2]) for x in (a, b, c))
        assert not np.array_equal(ra, rb) and not np.array_equal(ra, rc), algo


def test_py1e_warns_when_shards_exceed_the_block():
    with pytest.warns(UserWarning, match="shuffle_block_size"):
        sh = make_shuffle(
            algo="py1e",
            unit_sizes=np.array([100, 100]),
            row_start=np.array([0, 200]),
            num_canonical_nodes=1,
            seed=0,
            epoch=0,
            block_size=10,
        )
        sh.lookup(np.zeros(3, dtype=np.int64), np.arange(3))


def test_unknown_algo():
    with pytest.raises(ValueError, match="shuffle_algo"):
        make_shuffle(
            algo="py3x",
            unit_sizes=np.array([1]),
            row_start=np.array([0, 1]),
            num_canonical_nodes=1,
            seed=0,
            epoch=0,
            block_size=1,
        )


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12), c=st.integers(1, 5), seed=st.integers(0, 50)
)
def test_divide_spans_gives_each_node_a_contiguous_run_of_the_unit_order(sizes, c, seed):
    from streaming.plan.spans import divide_spans

    sizes = np.array(sizes)
    if sizes.sum() < c:
        return
    order = np.random.default_rng(seed).permutation(len(sizes))
    sp = divide_spans(unit_sizes=sizes, num_canonical_nodes=c, seed=seed, epoch=0, run_order=order)
    run_start = np.empty(len(sizes), dtype=np.int64)
    run_start[order] = np.cumsum(sizes[order]) - sizes[order]
    e = int(sizes.sum())
    for cc in range(c):
        ks = range(int(sp.node_ptr[cc]), int(sp.node_ptr[cc + 1]))
        pieces = sorted((int(run_start[sp.unit[k]] + sp.unit_off[k]), int(sp.length[k])) for k in ks)
        at = cc * e // c
        for start, length in pieces:  # pieces tile the node's row of the run order exactly
            assert start == at
            at += length
        assert at == (cc + 1) * e // c
