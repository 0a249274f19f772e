"""Hypothesis: random schemas, samples, shard limits and compressions round-trip through writer and reader."""

from __future__ import annotations

import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import JSONWriter, LocalDataset, MDSWriter
from streaming.tools.check import validate_dataset
from tests.streaming.helpers import DTYPES


def _value(kind: str):
    if kind == "bytes":
        return st.binary(max_size=64)
    if kind == "str":
        return st.text(max_size=32)
    if kind == "int":
        return st.integers(-(2**63), 2**63 - 1)
    if kind == "json":
        return st.dictionaries(
            st.text(max_size=5), st.integers(-1000, 1000) | st.text(max_size=5), max_size=3
        )
    if kind == "str_int":
        return st.integers(-(10**30), 10**30)
    dtype = kind.split(":")[1]
    return st.builds(
        lambda shape, seed: np.random.default_rng(seed).integers(0, 100, size=shape).astype(dtype),
        st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
        st.integers(0, 2**32 - 1),
    )


KINDS = ["bytes", "str", "int", "json", "str_int"] + [f"ndarray:{d}" for d in DTYPES]


@st.composite
def datasets(draw):
    names = draw(
        st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=5, unique=True)
    )
    columns = {n: draw(st.sampled_from(KINDS)) for n in names}
    samples = draw(st.lists(st.fixed_dictionaries({n: _value(k) for n, k in columns.items()}), max_size=30))
    return columns, samples


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a == b


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=datasets(),
    size_limit=st.sampled_from([None, 200, 1000, "1kb"]),
    compression=st.sampled_from([None, "zstd", "gz", "bz2"]),
)
def test_mds_round_trip(data, size_limit, compression):
    columns, samples = data
    with tempfile.TemporaryDirectory() as out:
        with MDSWriter(
            out=out, columns=columns, size_limit=size_limit, compression=compression, hashes=["xxh64"]
        ) as w:
            for s in samples:
                w.write(s)
        ds = LocalDataset(out)
        assert len(ds) == len(samples)
        for expected, actual in zip(samples, ds):
            assert set(actual) == set(columns)
            assert all(_same(expected[k], actual[k]) for k in columns)
        assert validate_dataset(out) == []


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"t": st.text(max_size=20), "n": st.integers(-(2**40), 2**40), "f": st.floats(allow_nan=False)}
        ),
        max_size=30,
    ),
    size_limit=st.sampled_from([None, 100, 500]),
)
def test_json_round_trip(rows, size_limit):
    with tempfile.TemporaryDirectory() as out:
        with JSONWriter(out=out, columns={"t": "str", "n": "int", "f": "float"}, size_limit=size_limit) as w:
            for r in rows:
                w.write(r)
        assert list(LocalDataset(out)) == rows
