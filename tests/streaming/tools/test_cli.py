"""``python -m streaming``: inspect, validate (exit 1 naming the bad shard) and rebuild-index."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from streaming import CSVWriter, LocalDataset, MDSWriter
from streaming.tools.cli import main


@pytest.fixture
def dataset(tmp_path):
    out = tmp_path / "ds"
    with MDSWriter(
        out=str(out),
        columns={"tokens": "ndarray:uint16", "id": "int"},
        compression="zstd",
        hashes=["sha1", "xxh64"],
        size_limit=1000,
    ) as w:
        for i in range(60):
            w.write({"tokens": np.arange(i % 7 + 1, dtype=np.uint16), "id": i})
    return out


def test_inspect(dataset, capsys):
    assert main(["inspect", str(dataset)]) == 0
    out = capsys.readouterr().out
    assert "samples      60" in out and "ndarray:uint16" in out and "zstd" in out
    assert main(["inspect", str(dataset), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == 60 and info["columns"] == [{"id": "int", "tokens": "ndarray:uint16"}]
    assert info["raw_bytes"] > 0 and info["stored_bytes"] > 0


def test_validate_ok_and_corrupt(dataset, capsys):
    assert main(["validate", str(dataset), "--decode"]) == 0
    assert "60 samples verified" in capsys.readouterr().out
    target = dataset / "shard.00001.mds.zstd"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    assert main(["validate", str(dataset)]) == 1
    err = capsys.readouterr().err
    assert "shard 1 (shard.00001.mds.zstd)" in err and "digest" in err


def test_validate_catches_bad_offsets_without_hashes(tmp_path, capsys):
    with MDSWriter(out=str(tmp_path), columns={"x": "bytes"}) as w:
        for i in range(4):
            w.write({"x": b"ab" * (i + 1)})
    path = tmp_path / "shard.00000.mds"
    data = bytearray(path.read_bytes())
    data[8:12] = (10**6).to_bytes(4, "little")  # offsets[1] way past the end
    path.write_bytes(bytes(data))
    assert main(["validate", str(tmp_path)]) == 1
    assert "not monotonic" in capsys.readouterr().err


def test_validate_size_mismatch(tmp_path, capsys):
    with CSVWriter(out=str(tmp_path), columns={"w": "str"}) as w:
        w.write({"w": "a"})
    (tmp_path / "shard.00000.csv").write_text("w\na\nextra\n")
    assert main(["validate", str(tmp_path)]) == 1
    assert "index.json records" in capsys.readouterr().err


@pytest.mark.parametrize("compression", [None, "gz"])
def test_rebuild_index(tmp_path, compression):
    with MDSWriter(
        out=str(tmp_path), columns={"x": "str"}, size_limit=200, compression=compression, hashes=["md5"]
    ) as w:
        for i in range(30):
            w.write({"x": f"v{i}"})
    original = (tmp_path / "index.json").read_text()
    (tmp_path / "index.json").unlink()
    assert main(["rebuild-index", str(tmp_path)]) == 0
    assert (tmp_path / "index.json").read_text() == original
    assert main(["rebuild-index", str(tmp_path)]) == 1  # refuses to overwrite without --force
    assert main(["rebuild-index", str(tmp_path), "--force"]) == 0
    assert [s["x"] for s in LocalDataset(str(tmp_path))] == [f"v{i}" for i in range(30)]


def test_rebuild_split_format(tmp_path):
    with CSVWriter(out=str(tmp_path), columns={"w": "str", "n": "int"}, size_limit=50) as w:
        for i in range(12):
            w.write({"w": f"w{i}", "n": i})
    original = (tmp_path / "index.json").read_text()
    (tmp_path / "index.json").unlink()
    assert main(["rebuild-index", str(tmp_path)]) == 0
    assert (tmp_path / "index.json").read_text() == original


def test_module_entrypoint(dataset):
    result = subprocess.run(
        [sys.executable, "-m", "streaming", "inspect", str(dataset), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout)["shards"] > 1
    missing = subprocess.run(
        [sys.executable, "-m", "streaming", "validate", str(dataset / "nope")], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "no such folder" in missing.stderr
    (dataset / "empty").mkdir()
    empty = subprocess.run(
        [sys.executable, "-m", "streaming", "validate", str(dataset / "empty")],
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 1 and "no index.json" in empty.stderr


def test_commands_accept_urls(s3_bucket, capsys):
    remote = f"{s3_bucket}/ds"
    with MDSWriter(out=remote, columns={"x": "int"}, size_limit=200, hashes=["sha1"]) as w:
        for i in range(30):
            w.write({"x": i})
    assert main(["inspect", remote, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == 30 and info["path"] == f"{remote}/index.json"
    assert main(["validate", remote]) == 0
    from streaming.storage.backends import get_backend

    get_backend(remote).delete(f"{remote}/index.json")
    assert main(["inspect", remote]) == 1
    assert main(["rebuild-index", remote]) == 0
    assert main(["validate", remote, "--decode"]) == 0
    assert "30 samples verified" in capsys.readouterr().out


def test_inspect_a_missing_folder_names_it_without_suggesting_rebuild_index(tmp_path, capsys):
    """Issue 26 item 8: a mistyped path suggested `rebuild-index` on a folder that does not exist."""
    assert main(["inspect", str(tmp_path / "no" / "such")]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such folder" in err and "rebuild-index" not in err
    assert err.count("\n") <= 1
    assert main(["inspect", str(tmp_path)]) != 0  # a folder without index.json: rebuild-index is the way
    assert "rebuild-index" in capsys.readouterr().err
