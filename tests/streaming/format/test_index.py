"""`index.json` parsing on hostile input: each case is an input the fuzz suite (`tests/fuzz`, issue 39) found
ending in a raw traceback, an overflow or a message naming no file; each is now one error naming the file."""

from __future__ import annotations

import json

import pytest

from streaming import LocalDataset, MDSWriter, StreamingDataset
from streaming.format.index import IndexError_, load_index
from streaming.util.safepath import UnsafePathError


def _write(path, *, hashes=None):
    with MDSWriter(out=str(path), columns={"x": "int", "s": "str"}, size_limit=180, hashes=hashes) as w:
        for i in range(24):
            w.write({"x": i, "s": f"sample {i}"})
    return path


def _edit(path, fn):
    index = json.loads((path / "index.json").read_text())
    fn(index)
    (path / "index.json").write_text(json.dumps(index))


def test_json_nested_past_the_recursion_limit_is_one_error(tmp_path):
    (tmp_path / "index.json").write_text('{"a":' * 100_000 + "0" + "}" * 100_000)  # was RecursionError
    with pytest.raises(IndexError_, match=r"index\.json: JSON nested too deeply \(over 100 levels\)"):
        load_index(str(tmp_path))


def test_a_deep_value_inside_a_shard_is_refused_before_parsing(tmp_path):
    _write(tmp_path)
    text = (
        (tmp_path / "index.json")
        .read_text()
        .replace('"hashes": []', '"hashes": ' + "[" * 1100 + "]" * 1100, 1)
    )
    (tmp_path / "index.json").write_text(text)
    with pytest.raises(IndexError_, match=r"nested too deeply \(over 100 levels\)"):
        StreamingDataset(local=str(tmp_path))


def test_bytes_that_are_not_utf8_name_the_file(tmp_path):
    _write(tmp_path)
    raw = (tmp_path / "index.json").read_bytes()
    (tmp_path / "index.json").write_bytes(raw[:220] + b"\x88\xae\xc1" + raw[220:])  # was UnicodeDecodeError
    with pytest.raises(IndexError_, match=r"index\.json: not UTF-8 text \(byte 220\)"):
        load_index(str(tmp_path))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("column_names", [[], "x"], "'column_names' must be a list of strings"),  # was TypeError (reader.py)
        ("column_encodings", [[], "str"], "'column_encodings' must be a list of strings"),  # AttributeError
        ("column_sizes", "8", "'column_sizes' must be a list of null or ints"),
        ("compression", 3, "'compression' must be null or a compression this library reads, got 3"),
        ("compression", "â𝤲", "'compression' must be null or a compression this library reads, got 'â𝤲'"),
        ("hashes", [1], "'hashes' must be a list of algorithm names"),
        (
            "samples",
            10**30,
            "'samples' must be an int from 0 to 4294967295",
        ),  # was OverflowError (index_cache)
        ("samples", 2**63 - 1, "'samples' must be an int from 0 to"),  # was a negative epoch size
        ("samples", True, "'samples' must be an int"),
    ],
)
def test_config_values_of_the_wrong_type_or_size_are_named(tmp_path, key, value, message):
    _write(tmp_path)
    _edit(tmp_path, lambda idx: idx["shards"][0].update({key: value}))
    with pytest.raises(IndexError_, match=message) as err:
        StreamingDataset(local=str(tmp_path))
    assert "index.json shard 0" in str(err.value)


def test_a_declared_size_past_int64_is_refused(tmp_path):
    _write(tmp_path)
    _edit(tmp_path, lambda idx: idx["shards"][1]["raw_data"].update(bytes=2**64))  # was OverflowError
    with pytest.raises(IndexError_, match=r"shard 1 raw_data: bad file entry .*bytes: an int from 0 to"):
        StreamingDataset(local=str(tmp_path))


def test_a_declared_size_the_shard_does_not_have_names_the_shard(tmp_path):
    _write(tmp_path)
    _edit(tmp_path, lambda idx: idx["shards"][0].update(column_sizes=[None, None, 131071]))
    ds = LocalDataset(str(tmp_path))
    with pytest.raises(
        ValueError, match=r"shard\.00000\.mds: column_sizes \[None, None, 131071\] do not match"
    ):
        ds[0]


def test_a_name_longer_than_the_file_system_allows_is_refused(tmp_path):
    _write(tmp_path)
    _edit(tmp_path, lambda idx: idx["shards"][0]["raw_data"].update(basename="a" * 5000))  # was ENAMETOOLONG
    with pytest.raises(UnsafePathError, match="a component is longer than 255 bytes") as err:
        LocalDataset(str(tmp_path))
    assert len(str(err.value)) < 1000


def test_a_corrupt_shard_of_a_local_stream_is_a_user_error(tmp_path):
    """`HashMismatchError` was an `OSError` only: `train.py` printed its traceback."""
    _write(tmp_path, hashes=["xxh64"])
    (tmp_path / "shard.00000.mds").write_bytes(b"")
    ds = StreamingDataset(local=str(tmp_path))
    with pytest.raises(ValueError, match=r"shard\.00000\.mds: xxh64 is .* index\.json says"):
        ds[0]


def test_an_index_over_the_json_cap_is_refused_unread(tmp_path, monkeypatch):
    """SECURITY.md: index.json is read with a size cap (FOUNDRY_MAX_JSON_MB), locally and from a remote."""
    monkeypatch.setenv("FOUNDRY_MAX_JSON_MB", "1")
    (tmp_path / "index.json").write_text('{"version": 2, "shards": []}' + " " * (1 << 20))
    with pytest.raises(IndexError_, match=r"over 1,048,576 bytes.*FOUNDRY_MAX_JSON_MB"):
        load_index(str(tmp_path))


def test_a_remote_index_over_the_json_cap_is_not_downloaded(tmp_path, s3_bucket, s3_env, monkeypatch):
    import boto3

    from streaming.cache.shards import fetch_index
    from streaming.util.sizes import SizeLimitExceeded

    monkeypatch.setenv("FOUNDRY_MAX_JSON_MB", "1")
    body = b'{"version": 2, "shards": []}' + b" " * (1 << 20)
    boto3.client("s3", endpoint_url=s3_env).put_object(Bucket=s3_bucket[5:], Key="ds/index.json", Body=body)
    with pytest.raises(SizeLimitExceeded):
        fetch_index(f"{s3_bucket}/ds", str(tmp_path / "local"))
    assert not (tmp_path / "local" / "index.json").exists()
