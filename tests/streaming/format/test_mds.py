"""Golden bytes of a small MDS shard, derived from the format spec (streaming.md §2.3)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streaming.format.mds import MDSSchema, ShardFormatError, build_mds_shard, mds_config, parse_mds_header

COLUMNS = {"arr": "ndarray:uint8:2,2", "dyn": "ndarray", "f": "float32", "num": "int", "txt": "str"}
SAMPLE = {"arr": np.zeros((2, 2), np.uint8), "dyn": np.zeros(1, np.int16), "f": 1.5, "num": 0, "txt": ""}
# Per-sample bytes from the spec: var lengths (dyn=5, txt=0), arr, dyn (dtype 17, shape byte 4, dim 1, int16 0),
# float32 1.5, int64 0, empty txt.
SAMPLE_HEX = "05000000000000000000000011040100000000c03f0000000000000000"


def test_sample_bytes_match_spec():
    encode = MDSSchema.from_columns(COLUMNS).encoder()
    assert encode(SAMPLE).hex() == SAMPLE_HEX


def test_shard_header_matches_spec_example():
    schema = MDSSchema.from_columns(COLUMNS)
    # A 267-byte config (here: one sha256 hash, 64 MiB limit) puts the first sample at byte 279 as in the spec.
    config = mds_config(schema=schema, compression=None, hashes=["sha256"], size_limit=1 << 26)
    shard = build_mds_shard(config, [schema.encoder()(SAMPLE)])
    assert shard[:12].hex() == "010000001701000034010000"
    config_json = json.dumps(config, sort_keys=True).encode()
    assert shard[12:279] == config_json
    assert shard[279:].hex() == SAMPLE_HEX
    assert len(shard) == 308
    n, offsets, parsed = parse_mds_header(shard, path="x", expected_samples=1)
    assert (n, list(offsets), parsed) == (1, [279, 308], config)
    decoded = schema.decoder()(memoryview(shard)[279:308])
    assert decoded["f"] == np.float32(1.5) and decoded["num"] == 0 and decoded["txt"] == ""
    np.testing.assert_array_equal(decoded["dyn"], SAMPLE["dyn"])
    assert decoded["dyn"].dtype == np.int16 and decoded["arr"].shape == (2, 2)


def test_config_json_is_sorted_with_default_separators():
    schema = MDSSchema.from_columns({"b": "str", "a": "int"})
    config = mds_config(schema=schema, compression="zstd:7", hashes=["sha1", "xxh64"], size_limit=100)
    text = json.dumps(config, sort_keys=True)
    assert text.startswith(
        '{"column_encodings": ["int", "str"], "column_names": ["a", "b"], "column_sizes": [8, null]'
    )
    assert '"compression": "zstd:7"' in text


def test_parse_header_rejects_truncation_and_mismatch():
    schema = MDSSchema.from_columns({"x": "bytes"})
    config = mds_config(schema=schema, compression=None, hashes=[], size_limit=None)
    shard = build_mds_shard(config, [schema.encoder()({"x": b"abc"}) for _ in range(3)])
    with pytest.raises(ShardFormatError, match="truncated"):
        parse_mds_header(shard[:-1], path="s.mds")
    with pytest.raises(ShardFormatError, match="truncated"):
        parse_mds_header(shard[:6], path="s.mds")
    with pytest.raises(ShardFormatError, match="index.json says 4"):
        parse_mds_header(shard, path="s.mds", expected_samples=4)
    corrupt = bytearray(shard)
    corrupt[4 + 4 * 4] = ord("x")  # break the embedded JSON
    with pytest.raises(ShardFormatError, match="not JSON"):
        parse_mds_header(bytes(corrupt), path="s.mds")


def test_missing_column_names_the_column():
    encode = MDSSchema.from_columns({"a": "int", "b": "str"}).encoder()
    with pytest.raises(ValueError, match="missing column 'b'"):
        encode({"a": 1})
    with pytest.raises(ValueError, match="column 'a'"):
        encode({"a": "not an int", "b": "x"})
