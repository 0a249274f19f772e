"""Issue 28 items 1, 13: mosaicml-streaming's public import paths, and custom column encodings registered the
upstream way (``_encodings[name] = Cls``)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tests.streaming.compat.reference import run_reference

PATHS = {
    "streaming": ["MDSWriter", "JSONWriter", "CSVWriter", "TSVWriter", "XSVWriter", "StreamingDataset",
                  "StreamingDataLoader", "Stream", "LocalDataset"],
    "streaming.base": ["MDSWriter", "JSONWriter", "CSVWriter", "TSVWriter", "XSVWriter", "StreamingDataset",
                       "StreamingDataLoader", "Stream", "LocalDataset"],
    "streaming.base.dataset": ["StreamingDataset"],
    "streaming.base.dataloader": ["StreamingDataLoader"],
    "streaming.base.stream": ["Stream"],
    "streaming.base.local": ["LocalDataset"],
    "streaming.base.format": ["MDSWriter", "JSONWriter", "CSVWriter", "TSVWriter", "XSVWriter",
                              "get_index_basename"],
    "streaming.base.format.mds": ["MDSWriter"],
    "streaming.base.format.json": ["JSONWriter"],
    "streaming.base.format.xsv": ["CSVWriter", "TSVWriter", "XSVWriter"],
    "streaming.base.format.mds.encodings": ["Encoding", "_encodings", "get_mds_encodings", "is_mds_encoding",
                                            "mds_encode", "mds_decode", "get_mds_encoded_size"],
    "streaming.base.util": ["merge_index", "clean_stale_shared_memory", "bytes_to_int", "number_abbrev_to_int",
                            "get_list_arg"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PATHS))
def test_the_public_paths_import(module):
    mod = importlib.import_module(module)
    for name in PATHS[module]:
        assert getattr(mod, name) is not None, f"{module}.{name}"


def test_the_same_paths_exist_upstream(tmp_path):
    """The list above is upstream's: each name imports from mosaicml-streaming 0.13.0 too."""
    code = f"""
        import importlib, json
        missing = [f"{{m}}.{{n}}" for m, names in {PATHS!r}.items() for n in names
                   if not hasattr(importlib.import_module(m), n)]
        print(json.dumps(missing))
    """
    assert run_reference(code, cwd=tmp_path) == []


def test_helpers_behave_as_upstreams():
    from streaming.base.util import (
        bytes_to_int,
        clean_stale_shared_memory,
        get_list_arg,
        number_abbrev_to_int,
    )

    assert bytes_to_int("64mb") == 64 << 20 and number_abbrev_to_int("100k") == 100_000
    assert get_list_arg("a,b") == ["a", "b"] and get_list_arg("") == []
    assert clean_stale_shared_memory() is None


_UINT4 = '''
class UInt4(Encoding):
    """Two 4-bit values packed in a byte (a custom encoding, as upstream's docs show them)."""
    size = 1
    def encode(self, obj):
        return bytes([(int(obj[0]) << 4) | int(obj[1])])
    def decode(self, data):
        return [data[0] >> 4, data[0] & 15]
_encodings["uint4"] = UInt4
'''


def test_a_custom_encoding_registered_upstreams_way_reads_and_writes_both_ways(tmp_path):
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.format.mds.encodings import (
        Encoding,
        _encodings,
        get_mds_encoded_size,
        is_mds_encoding,
    )

    exec(_UINT4, {"Encoding": Encoding, "_encodings": _encodings})  # what a user's module does on import
    assert is_mds_encoding("uint4") and get_mds_encoded_size("uint4") == 1
    with MDSWriter(out=str(tmp_path / "ours"), columns={"p": "uint4", "i": "int"}) as w:
        for i in range(20):
            w.write({"p": [i % 16, (i * 3) % 16], "i": i})
    got = [s["p"] for s in StreamingDataset(local=str(tmp_path / "ours"), batch_size=1)]
    assert got == [[i % 16, (i * 3) % 16] for i in range(20)]
    code = f"""
        import json
        from streaming import MDSWriter, StreamingDataset
        from streaming.base.format.mds.encodings import Encoding, _encodings
        exec({_UINT4!r})
        with MDSWriter(out={str(tmp_path / "theirs")!r}, columns={{"p": "uint4", "i": "int"}}) as w:
            for i in range(20):
                w.write({{"p": [i % 16, 15 - i % 16], "i": i}})
        ds = StreamingDataset(local={str(tmp_path / "ours")!r}, batch_size=1)
        print(json.dumps([ds[i]["p"] for i in range(20)]))
    """
    assert run_reference(code, cwd=tmp_path) == got  # upstream reads ours
    theirs = StreamingDataset(local=str(tmp_path / "theirs"), batch_size=1)
    assert [theirs[i]["p"] for i in range(20)] == [[i % 16, 15 - i % 16] for i in range(20)]  # we read theirs
    assert np.array_equal((tmp_path / "ours" / "shard.00000.mds").read_bytes()[:4], np.uint32(20).tobytes())


def test_a_builtin_encoding_cannot_be_replaced():
    from streaming.base.format.mds.encodings import Encoding, _encodings

    class Fake(Encoding):
        def encode(self, obj):
            return b""

        def decode(self, data):
            return None

    with pytest.raises(ValueError, match="built-in"):
        _encodings["int"] = Fake


@pytest.mark.parametrize("cache_limit", [None, "1mb"])
def test_num_samples_and_evict_shard(tmp_path, cache_limit):
    """Issue 28 item 2: upstream's `num_samples` and `evict_shard()`; a shard is fetched again after it."""
    from streaming import MDSWriter, StreamingDataset

    with MDSWriter(out=str(tmp_path / "remote"), columns={"i": "int"}, size_limit=200) as w:
        for i in range(100):
            w.write({"i": i})
    ds = StreamingDataset(
        remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), batch_size=1, cache_limit=cache_limit
    )
    assert ds.num_samples == ds.size == 100
    assert ds[0]["i"] == 0
    raw = tmp_path / "cache" / ds.shards[0].raw_data.basename
    assert raw.exists()
    ds.evict_shard(0)
    assert not raw.exists()
    assert (
        StreamingDataset(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), batch_size=1)[1]["i"]
        == 1
    )
    assert raw.exists()
    local_only = StreamingDataset(local=str(tmp_path / "remote"), batch_size=1)
    local_only.evict_shard(0)  # the only copy: never deleted
    assert (tmp_path / "remote" / ds.shards[0].raw_data.basename).exists()


def test_errors_are_upstreams_types_too(tmp_path):
    """Issue 28 item 9: the exception types upstream raises (ours subclass them, keeping our messages)."""
    import json

    from streaming import MDSWriter, StreamingDataset

    with pytest.raises(ValueError, match="bogus"):
        MDSWriter(out=str(tmp_path / "w"), columns={"x": "int"}, bogus=1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "index.json").write_text("")
    with pytest.raises(json.JSONDecodeError, match="not valid JSON"):
        StreamingDataset(local=str(tmp_path / "empty"), batch_size=1)
    (tmp_path / "none").mkdir()
    with pytest.raises(RuntimeError, match="no index.json"):
        StreamingDataset(local=str(tmp_path / "none"), batch_size=1)
