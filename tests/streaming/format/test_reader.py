"""Readers on damaged input: truncated and corrupted shards, index/shard mismatches, bad indexes."""

from __future__ import annotations

import json

import pytest

from streaming import JSONWriter, LocalDataset, MDSWriter
from streaming.format.index import IndexError_, load_index
from streaming.format.mds import ShardFormatError


def _write(path, n=20, **kwargs):
    with MDSWriter(out=str(path), columns={"x": "bytes"}, **kwargs) as w:
        for i in range(n):
            w.write({"x": bytes([i]) * 10})
    return path


def test_truncated_shard_names_the_file(tmp_path):
    _write(tmp_path)
    shard = tmp_path / "shard.00000.mds"
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(ShardFormatError, match=r"shard\.00000\.mds.*truncated"):
        LocalDataset(str(tmp_path))[0]


def test_sample_count_mismatch(tmp_path):
    _write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    index["shards"][0]["samples"] = 21
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ShardFormatError, match="index.json says 21"):
        LocalDataset(str(tmp_path))[0]


def test_corrupt_compressed_shard(tmp_path):
    _write(tmp_path, compression="zstd")
    path = tmp_path / "shard.00000.mds.zstd"
    path.write_bytes(b"garbage" + path.read_bytes()[7:])
    with pytest.raises(ShardFormatError, match="cannot decompress"):
        LocalDataset(str(tmp_path))[0]


def test_missing_shard_file(tmp_path):
    _write(tmp_path)
    (tmp_path / "shard.00000.mds").unlink()
    with pytest.raises(FileNotFoundError, match="shard.00000.mds"):
        LocalDataset(str(tmp_path))[0]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda idx: idx.update(version=3), "unsupported index version 3"),
        (lambda idx: idx["shards"][0].update(extra=1), "unexpected keys \\['extra'\\]"),
        (lambda idx: idx["shards"][0].pop("column_sizes"), "missing keys \\['column_sizes'\\]"),
        (lambda idx: idx["shards"][0].update(format="parquet"), "unknown shard format 'parquet'"),
        (lambda idx: idx["shards"][0].update(samples=-1), "'samples' must be"),
    ],
)
def test_bad_index_is_named(tmp_path, mutate, message):
    _write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    mutate(index)
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(IndexError_, match=message):
        load_index(str(tmp_path))


def test_unknown_encoding_in_index(tmp_path):
    _write(tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    index["shards"][0]["column_encodings"] = ["floaty"]
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="floaty"):
        LocalDataset(str(tmp_path))[0]


def test_truncated_json_shard(tmp_path):
    with JSONWriter(out=str(tmp_path), columns={"t": "str"}) as w:
        for i in range(5):
            w.write({"t": str(i)})
    data = tmp_path / "shard.00000.json"
    data.write_bytes(data.read_bytes()[:-3])
    with pytest.raises(ShardFormatError, match="truncated"):
        LocalDataset(str(tmp_path))[0]
