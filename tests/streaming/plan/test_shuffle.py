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


def _py1e_full(sh: ExpandingShuffle, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The definition of node c's py1e order: every slot's (sample, key), stably sorted by key."""
    pos, span, keys = sh.slot_keys(c, 0, int(sh.spans.node_len[c]))
    order = np.argsort(keys, kind="stable")
    return sh.slot_samples(pos, span)[order], keys[order]


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, _ = _py1e_full(sh, 0)
        got = sh.lookup(node, j)
    assert np.array_equal(got, want)
    # each sample moves at most the expansion reach from its layout slot
    pos, span, _ = sh.slot_keys(0, 0, e)
    layout = np.empty(e, dtype=np.int64)
    layout[sh.slot_samples(pos, span)] = pos
    assert np.all(np.abs(layout[got] - np.arange(e)) <= 2 * sh.reach)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=15),
    c=st.integers(1, 3),
    bs=st.integers(2, 200),
    window=st.integers(1, 60),
    chunk=st.integers(1, 70),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_py1e_window_in_isolation_equals_its_slice_and_counts_keys_below(
    sizes, c, bs, window, chunk, seed, data
):
    """A window computed alone by a fresh shuffle (any chunk size) is the same slice of the full sort, and the
    count of keys below the window is exact."""
    if sum(sizes) < c:
        return
    sh, *_ = _setup(sizes, c, "py1e", bs=bs, window=window, seed=seed)
    node = data.draw(st.integers(0, c - 1))
    k = data.draw(st.integers(0, sh.num_blocks(node) - 1))
    fresh, *_ = _setup(sizes, c, "py1e", bs=bs, window=window, seed=seed)
    fresh.chunk = chunk
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, got = fresh._compute_block(node, k)
        want, keys = _py1e_full(sh, node)
    v0, v1 = fresh.window_start(k), fresh.window_start(k + 1)
    nb, node_len = fresh.num_blocks(node), int(fresh.spans.node_len[node])
    assert fresh.window_start(nb - 1) < node_len <= fresh.window_start(nb)  # the windows cover the node
    assert all(fresh.window_start(i) <= fresh.window_start(i + 1) for i in range(nb))
    assert start == int(np.count_nonzero(keys < v0))
    inside = (keys >= v0) & (keys < v1)
    assert np.array_equal(got, want[inside])
    assert np.array_equal(got, want[start : start + len(got)])


def test_py1e_spread_and_within_span_shuffle_statistics():
    """Keys are uniform on each span's delta range; a sample's place in its span is uniform (no bias toward the
    span's start); the order moves samples by about the block size."""
    sizes = [100] * 400
    sh, node, j, e = _setup(sizes, 1, "py1e", bs=2000, seed=3)
    pos, span, keys = sh.slot_keys(0, 0, e)
    lo, width = sh._span_spread(0, span)
    frac = (keys - pos - lo) / width
    hist = np.histogram(frac, bins=10, range=(0, 1))[0]
    assert hist.min() > 0.9 * e / 10 and hist.max() < 1.1 * e / 10
    # slot -> sample within each span: which sample offset lands in the first slot of a span is uniform
    first = sh.slot_samples(sh.spans.cum[:400], np.arange(400)) - sh.spans.big_start[:400]
    assert len(np.unique(first)) > 80  # 400 draws over 100 values
    samples = sh.slot_samples(pos, span) - sh.spans.big_start[span]
    assert abs(np.corrcoef(samples, pos - sh.spans.cum[span])[0, 1]) < 0.05
    got = sh.lookup(node, j)
    layout = np.empty(e, dtype=np.int64)
    layout[sh.slot_samples(pos, span)] = pos
    moved = np.abs(layout[got] - np.arange(e))
    assert 200 < np.median(moved) < 1000  # ~ bs / 3 .. bs / 2 for the difference of two uniform deltas


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


@settings(max_examples=15, deadline=None)
@given(
    shard=st.integers(50, 3000),
    num_shards=st.integers(2, 12),
    c=st.integers(1, 2),
    bs=st.integers(100, 300_000),
    seed=st.integers(0, 2**31),
)
def test_py1e_default_ramp_windows_concatenate_to_the_global_sort(shard, num_shards, c, bs, seed):
    """With the default width (first window 4096 to 65536 keys, then doubling), the windows computed one by one,
    each by a fresh shuffle, concatenate to the node's full sort by key: the ramp only splits the work."""
    sh, *_ = _setup([shard] * num_shards, c, "py1e", bs=bs, seed=seed)
    first, span = sh.window_start(1), min(int(sh.spans.node_len.max()), sh.reach)
    assert sh.window_start(sh.ramp) == 1 << 19 and 4096 <= first <= 65536
    assert first * 8 >= span and (first == 4096 or first * 4 < span)
    for node in range(c):
        want, _ = _py1e_full(sh, node)
        pieces = []
        for k in range(sh.num_blocks(node)):
            fresh, *_ = _setup([shard] * num_shards, c, "py1e", bs=bs, seed=seed)
            start, ids = fresh._compute_block(node, k)
            assert start == sum(len(p) for p in pieces)
            pieces.append(ids)
        assert np.array_equal(np.concatenate(pieces), want)


def test_py1e_first_window_of_a_60k_epoch_is_small():
    """The first sample of a 60k-sample epoch (issue 14's remote case) computes one 8192-key window, not the epoch."""
    sh, *_ = _setup([2040] * 29 + [840], 1, "py1e", bs=4_000_000, seed=7)
    assert sh.num_blocks(0) == 4  # keys [0, 8192), [8192, 16384), [16384, 32768), [32768, 65536)
    first = sh.lookup(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert list(sh._cache) == [(0, 0)] and 0 < len(sh._cache[(0, 0)][1]) < 16384
    want, _ = _py1e_full(sh, 0)
    assert first[0] == want[0]
