"""Writers: round trips of every encoding x compression x hash, shard cutting, crash safety, append."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, TSVWriter, XSVWriter
from streaming.format.compression import COMPRESSION_FAMILIES
from streaming.format.hashing import supported_hashes
from streaming.format.index import load_index
from tests.streaming.helpers import assert_same, every_encoding_sample

COMPRESSIONS = [None, *COMPRESSION_FAMILIES, "zstd:1", "gz:1", "br:0", "bz2:1"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_encoding_round_trips(tmp_path, compression):
    columns, _ = every_encoding_sample()
    samples = [every_encoding_sample(i)[1] for i in range(5)]
    with MDSWriter(out=str(tmp_path), columns=columns, compression=compression, size_limit="20kb") as w:
        for s in samples:
            w.write(s)
    ds = LocalDataset(str(tmp_path), allow_unsafe_types=True)
    assert len(ds) == 5
    for expected, actual in zip(samples, ds):
        for name, enc in columns.items():
            assert_same(expected[name], actual[name], encoding=enc)


@pytest.mark.parametrize("algo", supported_hashes())
def test_every_hash_recorded_and_validated(tmp_path, algo):
    from streaming.format.hashing import hash_bytes
    from streaming.tools.check import validate_dataset

    with MDSWriter(out=str(tmp_path), columns={"x": "int"}, hashes=[algo], compression="zstd") as w:
        for i in range(10):
            w.write({"x": i})
    shard = load_index(str(tmp_path)).shards[0]
    stored = (tmp_path / shard.zip_data.basename).read_bytes()
    assert shard.zip_data.hashes == {algo: hash_bytes(algo, stored)}
    assert set(shard.raw_data.hashes) == {algo}
    assert validate_dataset(str(tmp_path)) == []


def test_index_layout_and_shard_names(tmp_path):
    with MDSWriter(
        out=str(tmp_path), columns={"b": "bytes", "a": "int"}, size_limit=400, hashes=["sha1"]
    ) as w:
        for i in range(40):
            w.write({"a": i, "b": b"x" * 20})
    raw = json.loads((tmp_path / "index.json").read_text())
    assert list(raw) == ["shards", "version"] and raw["version"] == 2
    text = (tmp_path / "index.json").read_text()
    assert text == json.dumps(raw, sort_keys=True)
    shard0 = raw["shards"][0]
    assert sorted(shard0) == [
        "column_encodings",
        "column_names",
        "column_sizes",
        "compression",
        "format",
        "hashes",
        "raw_data",
        "samples",
        "size_limit",
        "version",
        "zip_data",
    ]
    assert shard0["column_names"] == ["a", "b"] and shard0["column_sizes"] == [8, None]
    names = sorted(os.listdir(tmp_path))
    assert names[0] == "index.json" and names[1] == "shard.00000.mds"
    assert all(s["raw_data"]["bytes"] <= 400 for s in raw["shards"])
    assert sum(s["samples"] for s in raw["shards"]) == 40
    assert all(s["samples"] > 0 for s in raw["shards"])


def test_oversized_first_sample_gets_its_own_shard_no_empty_shard(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"x": "bytes"}, size_limit=300) as w:
        w.write({"x": b"y" * 1000})
        w.write({"x": b"z"})
    shards = load_index(str(tmp_path)).shards
    assert [s.samples for s in shards] == [1, 1]
    assert LocalDataset(str(tmp_path))[0]["x"] == b"y" * 1000


def test_size_limit_strings_and_4gib_refusal(tmp_path):
    w = MDSWriter(out=str(tmp_path / "a"), columns={"x": "int"}, size_limit="64mb")
    assert w.size_limit == 64 << 20
    w.finish()
    with pytest.raises(ValueError, match="4 GiB"):
        MDSWriter(out=str(tmp_path / "b"), columns={"x": "int"}, size_limit="4gb")
    with pytest.raises(ValueError, match="size_limit"):
        MDSWriter(out=str(tmp_path / "c"), columns={"x": "int"}, size_limit="lots")


def test_unlimited_shard_refuses_4gib(tmp_path, monkeypatch):
    import streaming.writers.base as writer_mod

    monkeypatch.setattr(writer_mod, "MAX_SHARD_BYTES", 2000)
    w = MDSWriter(out=str(tmp_path), columns={"x": "bytes"}, size_limit=None)
    for _ in range(5):
        w.write({"x": b"a" * 300})  # cut automatically below the format limit
    with pytest.raises(ValueError, match="4 GiB"):
        w.write({"x": b"a" * 5000})
    w.finish()
    assert LocalDataset(str(tmp_path)).num_samples == 5


def test_failed_with_block_publishes_no_index(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with MDSWriter(out=str(tmp_path), columns={"x": "int"}, size_limit=100) as w:
            for i in range(50):
                w.write({"x": i})
            raise RuntimeError("boom")
    assert not (tmp_path / "index.json").exists()
    assert not any(name.startswith(".") for name in os.listdir(tmp_path)), "temp files left behind"


def test_existing_directory_rules(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"x": "int"}) as w:
        w.write({"x": 1})
    with pytest.raises(FileExistsError, match="exist_ok=True.*append=True"):
        MDSWriter(out=str(tmp_path), columns={"x": "int"})
    with MDSWriter(out=str(tmp_path), columns={"x": "int"}, exist_ok=True) as w:
        w.write({"x": 2})
    assert [s["x"] for s in LocalDataset(str(tmp_path))] == [2]


def test_append_continues_numbering(tmp_path):
    for start in (0, 10, 20):
        with MDSWriter(out=str(tmp_path), columns={"x": "int"}, append=True, size_limit=200) as w:
            for i in range(start, start + 10):
                w.write({"x": i})
    index = load_index(str(tmp_path))
    basenames = [s.raw_data.basename for s in index.shards]
    assert basenames == sorted(set(basenames)) and basenames[0] == "shard.00000.mds"
    assert [s["x"] for s in LocalDataset(str(tmp_path))] == list(range(30))
    with pytest.raises(ValueError, match="columns"):
        MDSWriter(out=str(tmp_path), columns={"y": "int"}, append=True)


def test_failed_append_keeps_old_index(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"x": "int"}) as w:
        w.write({"x": 1})
    before = (tmp_path / "index.json").read_text()
    with pytest.raises(KeyError):
        with MDSWriter(out=str(tmp_path), columns={"x": "int"}, append=True) as w:
            w.write({"x": 2})
            raise KeyError("crash")
    assert (tmp_path / "index.json").read_text() == before


def test_encoding_error_names_column(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"tokens": "ndarray:int32:4"}) as w:
        with pytest.raises(ValueError, match="tokens"):
            w.write({"tokens": np.zeros(3, np.int32)})
        w.write({"tokens": np.zeros(4, np.int32)})


def test_writer_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="compression"):
        MDSWriter(out=str(tmp_path / "a"), columns={"x": "int"}, compression="lzma")
    with pytest.raises(ValueError):
        MDSWriter(out=str(tmp_path / "b"), columns={"x": "int"}, hashes=["sha256", "md5"])
    with pytest.raises(ValueError, match="nope"):
        MDSWriter(out=str(tmp_path / "c"), columns={"x": "nope"})


@pytest.mark.parametrize("compression", [None, "zstd", "gz"])
def test_json_shards(tmp_path, compression):
    rows = [{"text": f"line {i}", "n": i, "score": i / 3} for i in range(25)]
    with JSONWriter(
        out=str(tmp_path),
        columns={"text": "str", "n": "int", "score": "float"},
        compression=compression,
        size_limit=300,
    ) as w:
        for r in rows:
            w.write(r)
    index = load_index(str(tmp_path))
    assert len(index.shards) > 1
    shard = index.shards[0]
    assert sorted(shard.to_json()) == [
        "columns",
        "compression",
        "format",
        "hashes",
        "newline",
        "raw_data",
        "raw_meta",
        "samples",
        "size_limit",
        "version",
        "zip_data",
        "zip_meta",
    ]
    assert list(LocalDataset(str(tmp_path))) == rows
    if compression is None:
        first = (tmp_path / "shard.00000.json").read_bytes().split(b"\n")[0]
        assert first == json.dumps(rows[0], sort_keys=True).encode()
        meta = (tmp_path / "shard.00000.json.meta").read_bytes()
        n = int.from_bytes(meta[:4], "little")
        assert int.from_bytes(meta[4:8], "little") == 0 and n == shard.samples


@pytest.mark.parametrize(
    ("cls", "fmt", "kwargs"),
    [(CSVWriter, "csv", {}), (TSVWriter, "tsv", {}), (XSVWriter, "xsv", {"separator": "|"})],
)
def test_xsv_shards(tmp_path, cls, fmt, kwargs):
    rows = [{"word": f"w{i}", "count": i, "p": i / 7} for i in range(20)]
    with cls(
        out=str(tmp_path), columns={"word": "str", "count": "int", "p": "float"}, size_limit=200, **kwargs
    ) as w:
        for r in rows:
            w.write(r)
    shard = load_index(str(tmp_path)).shards[0]
    assert shard.format == fmt and ("separator" in shard.config) == (fmt == "xsv")
    data = (tmp_path / f"shard.00000.{fmt}").read_bytes()
    sep = {"csv": ",", "tsv": "\t", "xsv": "|"}[fmt]
    assert data.split(b"\n")[0] == sep.join(["count", "p", "word"]).encode()
    meta = (tmp_path / f"shard.00000.{fmt}.meta").read_bytes()
    assert int.from_bytes(meta[4:8], "little") == len(data.split(b"\n")[0]) + 1
    assert list(LocalDataset(str(tmp_path))) == rows
    with cls(out=str(tmp_path / "bad"), columns={"word": "str"}, **kwargs) as w:
        with pytest.raises(ValueError, match="separator"):
            w.write({"word": f"a{sep}b"})
