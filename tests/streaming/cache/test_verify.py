"""validate_hash on shards already in the cache: a corrupted cached file is detected before first use and
downloaded again (or, with no remote, reported by name); a good file's verdict is remembered, not re-hashed."""

from __future__ import annotations

import os

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.cache.locks import lock_dir
from streaming.format import hashing
from streaming.format.index import load_index
from streaming.storage.transfer import HashMismatchError

PAD = b"p" * 200


def _write(out: str, compression: str | None = None, n: int = 40) -> None:
    with MDSWriter(
        out=out,
        columns={"x": "int", "pad": "bytes"},
        size_limit=2000,
        compression=compression,
        hashes=["sha1", "xxh64"],
    ) as w:
        for i in range(n):
            w.write({"x": i, "pad": PAD})


def _flip_pad_byte(path: str) -> None:
    """Corrupt one byte of a sample's ``pad`` value in place (the file stays parseable)."""
    with open(path, "r+b") as f:
        data = f.read()
        at = data.rfind(PAD) + len(PAD) // 2
        f.seek(at)
        f.write(b"q")


def _last_sample_of_shard0(local: str) -> int:
    return load_index(local).shards[0].samples - 1


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_flipped_byte_in_cached_shard_is_downloaded_again(tmp_path, compression):
    remote, local = str(tmp_path / "remote"), str(tmp_path / "cache")
    _write(remote, compression)
    ds = StreamingDataset(remote=remote, local=local, validate_hash="sha1")
    assert [ds[i]["x"] for i in range(ds.size)] == list(range(40))
    raw = os.path.join(local, ds.shards[0].raw_data.basename)
    _flip_pad_byte(raw)
    last = _last_sample_of_shard0(local)

    again = StreamingDataset(remote=remote, local=local, validate_hash="sha1")
    sample = again[last]
    assert sample["pad"] == PAD and sample["x"] == last
    assert again._shard_cache().downloads == 1, "only the corrupted shard is fetched again"
    if compression is None:
        with open(raw, "rb") as f, open(os.path.join(remote, ds.shards[0].raw_data.basename), "rb") as g:
            assert f.read() == g.read()


def test_flipped_byte_is_caught_by_default_and_not_with_the_opt_out(tmp_path):
    """Digests the index records are checked unless ``validate_hash="off"`` (upstream checks only when asked)."""
    remote, local = str(tmp_path / "remote"), str(tmp_path / "cache")
    _write(remote)
    ds = StreamingDataset(remote=remote, local=local)
    ds[0]
    _flip_pad_byte(os.path.join(local, ds.shards[0].raw_data.basename))
    unchecked = StreamingDataset(remote=remote, local=local, validate_hash="off")
    assert unchecked[_last_sample_of_shard0(local)]["pad"] != PAD
    assert (
        StreamingDataset(remote=remote, local=local)[_last_sample_of_shard0(local)]["pad"] == PAD
    )  # re-fetched


def test_corrupt_shard_without_remote_fails_naming_it(tmp_path):
    local = str(tmp_path / "ds")
    _write(local)
    name = load_index(local).shards[0].raw_data.basename
    _flip_pad_byte(os.path.join(local, name))
    ds = StreamingDataset(local=local, validate_hash="sha1")
    with pytest.raises(
        HashMismatchError, match=rf"{name}: sha1 is [0-9a-f]{{40}}, index.json says [0-9a-f]{{40}}"
    ):
        ds[0]
    assert StreamingDataset(local=local, validate_hash="sha1")[ds.size - 1]["x"] == 39, (
        "other shards still read"
    )


def test_verdict_is_remembered_across_processes(tmp_path, monkeypatch):
    remote, local = str(tmp_path / "remote"), str(tmp_path / "cache")
    _write(remote)
    StreamingDataset(remote=remote, local=local, validate_hash="off")[0]  # cached without any check
    calls: list[str] = []
    real = hashing.hash_file

    def counting(algo: str, path: str) -> str:
        calls.append(os.path.basename(path))
        return real(algo, path)

    monkeypatch.setattr(hashing, "hash_file", counting)
    name = load_index(local).shards[0].raw_data.basename
    assert StreamingDataset(remote=remote, local=local, validate_hash="xxh64")[0]["x"] == 0
    assert calls == [name], "the cached shard is hashed once before its first use"
    assert os.path.exists(os.path.join(lock_dir(local), f"{name}.xxh64.verdict"))

    calls.clear()
    fresh = StreamingDataset(remote=remote, local=local, validate_hash="xxh64")  # a new process's view
    assert fresh[0]["x"] == 0 and calls == [], "an untouched file is not hashed again"

    os.utime(os.path.join(local, name), ns=(1, 1))  # touched: the verdict no longer applies
    assert StreamingDataset(remote=remote, local=local, validate_hash="xxh64")[0]["x"] == 0
    assert calls == [name]
