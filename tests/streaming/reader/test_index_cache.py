"""The binary index cache: identical shards to eager parsing, invalidated by a changed index, rebuilt when
damaged, one valid file after concurrent builders, and unsafe names still refused with the same error."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import MDSWriter, Stream, StreamingDataset
from streaming.format.index import load_index
from streaming.reader import index_cache as index_cache_module
from streaming.reader.index_cache import ShardTable, cache_file, load_shard_table
from streaming.util.safepath import UnsafePathError


def _write(out: Path, n: int = 60, *, compression: str | None = None) -> str:
    cols = {"x": "int", "s": "str"}
    with MDSWriter(out=str(out), columns=cols, size_limit=150, compression=compression, hashes=["sha1"]) as w:
        for i in range(n):
            w.write({"x": i, "s": "y" * (i % 7)})
    return str(out)


def _cached(folder: str, cache: Path) -> ShardTable:
    return load_shard_table(folder, cache_dir=str(cache), min_bytes=0)


def test_cached_table_equals_eager_parsing(tmp_path):
    folder = _write(tmp_path / "ds", compression="zstd")
    eager = load_index(folder).shards
    table = _cached(folder, tmp_path / "c")
    assert table.is_cached and len(table) == len(eager)
    assert list(table) == eager  # ShardInfo dataclass equality: every field, config and file entry
    assert table.samples.tolist() == [s.samples for s in eager]
    assert table.compressed and table.first_unsafe == -1
    again = _cached(folder, tmp_path / "c")  # read back from the file
    assert again.is_cached and [again[i] for i in reversed(range(len(eager)))] == eager[::-1]


@settings(max_examples=15, deadline=None)
@given(
    samples=st.lists(st.integers(min_value=0, max_value=10**9), min_size=0, max_size=30),
    names=st.lists(st.text(alphabet="abc-_.09", min_size=1, max_size=8), min_size=30, max_size=30),
    zipped=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_lazy_materialisation_matches_eager(tmp_path_factory, samples, names, zipped):
    folder = tmp_path_factory.mktemp("idx")
    shards = []
    for i, n in enumerate(samples):
        name = f"d{i}/{names[i]}x.mds"
        shards.append(
            {
                "column_encodings": ["int", "str"],
                "column_names": ["x", "s"],
                "column_sizes": [8, None],
                "compression": "zstd" if zipped[i] else None,
                "format": "mds",
                "hashes": ["sha1"],
                "raw_data": {"basename": name, "bytes": n + 7, "hashes": {"sha1": "ab" * 20}},
                "samples": n,
                "size_limit": 1 << 20,
                "version": 2,
                "zip_data": {"basename": name + ".zstd", "bytes": 3, "hashes": {}} if zipped[i] else None,
            }
        )
    (folder / "index.json").write_text(json.dumps({"shards": shards, "version": 2}, sort_keys=True))
    eager = load_index(str(folder)).shards
    table = _cached(str(folder), tmp_path_factory.mktemp("cache"))
    assert table.is_cached
    assert [table[i] for i in range(len(eager))] == eager
    assert table.total_bytes.tolist() == [sum(f.bytes for f in s.files()) for s in eager]
    weights = {"choose": None, "proportion": 0.5, "repeat": None}
    expected = json.dumps({**weights, "shards": [s.to_json() for s in eager]}, sort_keys=True)
    assert table.fingerprint(weights) == ShardTable.from_index(load_index(str(folder))).fingerprint(weights)
    assert table.fingerprint(weights) == hashlib.sha256(expected.encode()).hexdigest()[:16]


def test_changed_index_invalidates_the_cache(tmp_path):
    folder = _write(tmp_path / "ds")
    first = _cached(folder, tmp_path / "c")
    index_file = Path(folder) / "index.json"
    obj = json.loads(index_file.read_text())
    obj["shards"] = obj["shards"][:-1]  # a rewritten index: one shard fewer
    index_file.write_text(json.dumps(obj, sort_keys=True))
    second = _cached(folder, tmp_path / "c")
    assert len(second) == len(first) - 1 and list(second) == load_index(folder).shards


@pytest.mark.parametrize("damage", ["truncate", "flip_array", "garbage"])
def test_damaged_cache_is_rebuilt_not_trusted(tmp_path, damage):
    folder = _write(tmp_path / "ds")
    _cached(folder, tmp_path / "c")
    file = cache_file(str(tmp_path / "c"), os.path.join(folder, "index.json"))
    data = bytearray(Path(file).read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 40]
    elif damage == "flip_array":
        data[16 + int.from_bytes(data[8:16], "little") + 8] ^= 0x01  # second shard's sample count
    else:
        data = bytearray(b"not a cache")
    Path(file).write_bytes(bytes(data))
    table = _cached(folder, tmp_path / "c")
    assert table.is_cached and list(table) == load_index(folder).shards
    assert Path(file).read_bytes() != bytes(data)  # rewritten


@pytest.mark.parametrize("use", ["shard", "fingerprint"])
def test_damaged_shard_text_is_caught_on_use_and_falls_back_to_the_index(tmp_path, use):
    """Opening checks only the arrays (cheap for every rank); a damaged shard text fails its own checksum when
    read (or the whole text's when fingerprinted): the table parses index.json instead and drops the file."""
    folder = _write(tmp_path / "ds")
    eager = ShardTable.from_index(load_index(folder))
    _cached(folder, tmp_path / "c")
    file = cache_file(str(tmp_path / "c"), os.path.join(folder, "index.json"))
    data = bytearray(Path(file).read_bytes())
    data[-30] ^= 0x01  # inside the last shard's JSON text
    Path(file).write_bytes(bytes(data))
    table = _cached(folder, tmp_path / "c")
    assert table.is_cached
    if use == "shard":
        assert table[0] == eager[0] and table.is_cached  # an intact shard is read from the cache
        assert table[len(table) - 1] == eager[len(eager) - 1]
    else:
        assert table.fingerprint({"a": 1}) == eager.fingerprint({"a": 1})
    assert not table.is_cached and list(table) == list(eager)
    assert not os.path.exists(file)
    assert _cached(folder, tmp_path / "c").is_cached  # rebuilt by the next start


def _build(args: tuple[str, str]) -> list[int]:
    folder, cache = args
    return load_shard_table(folder, cache_dir=cache, min_bytes=0).samples.tolist()


def test_concurrent_builders_end_with_one_valid_cache(tmp_path):
    folder = _write(tmp_path / "ds", n=400)
    cache = str(tmp_path / "c")
    os.makedirs(cache)
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_build, [(folder, cache)] * 8)
    expected = [s.samples for s in load_index(folder).shards]
    assert all(r == expected for r in results)
    files = [f for f in os.listdir(cache) if not f.startswith(".")]
    assert files == [os.path.basename(cache_file(cache, os.path.join(folder, "index.json")))]  # no temp left
    assert _cached(folder, tmp_path / "c").is_cached


def test_unsafe_name_refused_with_the_same_error_with_a_cache(tmp_path):
    folder = _write(tmp_path / "ds")
    index_file = Path(folder) / "index.json"
    obj = json.loads(index_file.read_text())
    obj["shards"][1]["raw_data"]["basename"] = "../../evil.mds"
    index_file.write_text(json.dumps(obj, sort_keys=True))
    with pytest.raises(UnsafePathError) as eager:
        load_index(folder)
    with pytest.raises(UnsafePathError) as cached:
        _cached(folder, tmp_path / "c")
    assert str(cached.value) == str(eager.value) and "shards[1].raw_data.basename" in str(cached.value)
    assert not os.path.exists(cache_file(str(tmp_path / "c"), str(index_file)))  # nothing cached


def test_dataset_through_the_cache_reads_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMING_CACHE", str(tmp_path / "cache"))
    folder = _write(tmp_path / "ds", compression="zstd")
    plain = StreamingDataset(local=folder, batch_size=4, shuffle=True)
    state = plain.state_dict(0)
    monkeypatch.setattr(index_cache_module, "MIN_CACHE_BYTES", 0)
    cached = StreamingDataset(streams=[Stream(local=folder)], batch_size=4, shuffle=True)
    assert cached.shards.tables[0].is_cached and not plain.shards.tables[0].is_cached  # type: ignore[attr-defined]
    assert os.listdir(tmp_path / "cache" / "indexes")
    assert [s["x"] for s in cached] == [s["x"] for s in plain]
    cached.load_state_dict(state)  # same streams fingerprint
    assert [cached[i]["x"] for i in range(cached.size)] == list(range(60))
