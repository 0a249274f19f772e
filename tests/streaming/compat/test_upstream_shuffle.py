"""``streaming.plan.upstream_shuffle`` against mosaicml-streaming 0.13.0's own shuffle functions, bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streaming.plan.upstream_shuffle import UPSTREAM_ALGOS, upstream_permutation
from tests.streaming.compat.reference import run_reference

CASES = [
    # (unit sizes, canonical nodes, seed, epoch, block size)
    ([30] * 20, 1, 7, 0, 64),
    ([30] * 20, 2, 7, 3, 64),
    ([17, 5, 40, 1, 33, 29, 8], 3, 9176, 1, 20),
    ([100] * 8, 4, 0, 0, 1 << 18),
    ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9], 5, 42, 2, 10),
]


def test_the_permutations_are_upstreams(tmp_path):
    code = f"""
        import json
        from streaming.base.shuffle import get_shuffle
        out = []
        for sizes, ncn, seed, epoch, bs in {CASES!r}:
            for algo in {list(UPSTREAM_ALGOS)!r}:
                out.append(get_shuffle(algo, __import__("numpy").array(sizes), ncn, seed, epoch, bs).tolist())
        print(json.dumps(out))
    """
    expected = iter(run_reference(code, cwd=tmp_path))  # type: ignore[call-overload]
    for sizes, ncn, seed, epoch, bs in CASES:
        for algo in UPSTREAM_ALGOS:
            ours = upstream_permutation(algo, np.array(sizes), ncn, seed, epoch, bs)
            assert ours.tolist() == next(expected), (algo, sizes, ncn, seed, epoch, bs)


@pytest.mark.parametrize("algo", UPSTREAM_ALGOS)
def test_a_permutation_of_the_big_ids(algo):
    perm = upstream_permutation(algo, np.array([5, 9, 2, 30]), 2, 1, 0, 8)
    assert sorted(perm.tolist()) == list(range(46)) and json.dumps(perm.tolist())
