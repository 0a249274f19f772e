"""LocalDataset: indexing forms, zero-copy arrays, unsafe types, compressed shards read without writing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming import LocalDataset, MDSWriter


@pytest.fixture
def dataset(tmp_path):
    with MDSWriter(
        out=str(tmp_path), columns={"id": "int", "tokens": "ndarray:int32:8"}, size_limit=500
    ) as w:
        for i in range(100):
            w.write({"id": i, "tokens": np.full(8, i, np.int32)})
    return str(tmp_path)


def test_indexing_forms(dataset):
    ds = LocalDataset(dataset)
    assert len(ds) == 100 and len(ds.index.shards) > 3
    assert ds[0]["id"] == 0 and ds[-1]["id"] == 99
    assert [s["id"] for s in ds[10:15]] == list(range(10, 15))
    assert [s["id"] for s in ds[[3, 1, 2]]] == [3, 1, 2]
    assert [s["id"] for s in ds[np.array([5, -1])]] == [5, 99]
    assert [s["id"] for s in ds] == list(range(100))
    with pytest.raises(IndexError, match="100 samples"):
        ds[100]
    with pytest.raises(TypeError):
        ds["a"]


def test_arrays_are_zero_copy_views(dataset):
    tokens = LocalDataset(dataset)[7]["tokens"]
    assert not tokens.flags.owndata and not tokens.flags.writeable
    np.testing.assert_array_equal(tokens, np.full(8, 7, np.int32))


def test_unsafe_types_refused_by_default(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"obj": "pkl"}) as w:
        w.write({"obj": {"a": 1}})
    with pytest.raises(ValueError, match="allow_unsafe_types=True"):
        LocalDataset(str(tmp_path))
    assert LocalDataset(str(tmp_path), allow_unsafe_types=True)[0]["obj"] == {"a": 1}


def test_compressed_dataset_is_read_without_writing(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"x": "str"}, compression="zstd", size_limit=200) as w:
        for i in range(30):
            w.write({"x": f"value {i}"})
    before = sorted(os.listdir(tmp_path))
    assert all(n.endswith(".zstd") for n in before if n != "index.json")
    os.chmod(tmp_path, 0o555)
    try:
        assert [s["x"] for s in LocalDataset(str(tmp_path))] == [f"value {i}" for i in range(30)]
    finally:
        os.chmod(tmp_path, 0o755)
    assert sorted(os.listdir(tmp_path)) == before


def test_split_subdirectory(tmp_path):
    with MDSWriter(out=str(tmp_path / "train"), columns={"x": "int"}) as w:
        w.write({"x": 3})
    assert LocalDataset(str(tmp_path), split="train")[0]["x"] == 3
    with pytest.raises(FileNotFoundError, match="val: no such folder .*split"):
        LocalDataset(str(tmp_path), split="val")
