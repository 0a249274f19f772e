"""merge_index: both call forms, basename prefixes, order."""

from __future__ import annotations

import pytest

from streaming import LocalDataset, MDSWriter, merge_index
from streaming.format.index import load_index


def _partitions(root, parts=3, per=7):
    for p in range(parts):
        with MDSWriter(out=str(root / str(p)), columns={"x": "int"}, size_limit=150) as w:
            for i in range(per):
                w.write({"x": p * 100 + i})


def test_merge_listed_indexes(tmp_path):
    _partitions(tmp_path)
    merge_index([str(tmp_path / str(p) / "index.json") for p in (2, 0, 1)], str(tmp_path))
    ds = LocalDataset(str(tmp_path))
    assert [s["x"] for s in ds] == [200 + i for i in range(7)] + list(range(7)) + [100 + i for i in range(7)]
    assert load_index(str(tmp_path)).shards[0].raw_data.basename.startswith("2/shard.")


def test_merge_by_listing(tmp_path):
    _partitions(tmp_path, parts=11, per=2)
    merge_index(str(tmp_path))
    xs = [s["x"] for s in LocalDataset(str(tmp_path))]
    assert xs == [p * 100 + i for p in range(11) for i in range(2)]  # numeric order: 2 before 10


def test_merge_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        merge_index(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        merge_index([str(tmp_path / "x" / "index.json")], str(tmp_path))


def test_merge_remote_partitions(s3_bucket, tmp_path):
    from streaming.storage import download_file, list_files

    for p in range(3):
        with MDSWriter(out=f"{s3_bucket}/ds/{p}", columns={"x": "int"}) as w:
            for i in range(4):
                w.write({"x": p * 10 + i})
    merge_index(f"{s3_bucket}/ds")
    for url in list_files(f"{s3_bucket}/ds/"):
        download_file(url, str(tmp_path / url[len(s3_bucket) + 4 :]))
    assert [s["x"] for s in LocalDataset(str(tmp_path))] == [p * 10 + i for p in range(3) for i in range(4)]
    merge_index([f"{s3_bucket}/ds/2/index.json", f"{s3_bucket}/ds/0/index.json"], f"{s3_bucket}/ds")
    download_file(f"{s3_bucket}/ds/index.json", str(tmp_path / "index.json"))
    assert [s["x"] for s in LocalDataset(str(tmp_path))] == [20, 21, 22, 23, 0, 1, 2, 3]
