"""Issue 25 items 4-6: what a corrupt or hostile dataset can do to a cache folder, and cannot.

- writes are bounded while they happen: a decompression bomb or a shard larger than index.json declares stops at
  the declared size (a child process with ``RLIMIT_FSIZE`` proves no larger file is ever written);
- no write or delete goes through a symbolic link inside a cache or dataset folder;
- digests index.json records are verified by default (one flipped bit is caught, locally and over S3), with an
  opt-out; ``samples: 0`` for a non-empty shard is refused.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import boto3
import pytest
import zstandard

from streaming import MDSWriter, StreamingDataset
from streaming.format.hashing import HASH_OFF, check_validate_hash, hash_to_check
from streaming.format.index import IndexError_
from streaming.format.mds import ShardFormatError
from streaming.storage import download_file
from streaming.storage.transfer import HashMismatchError, can_download_to_memory, download_to_memory
from streaming.util.safepath import UnsafePathError

REPO = Path(__file__).resolve().parents[3]


def _write(
    out: str | Path, *, n: int = 53, compression: str | None = None, hashes: list[str] | None = None
) -> None:
    with MDSWriter(
        out=str(out), columns={"x": "int", "pad": "bytes"}, compression=compression, hashes=hashes
    ) as w:
        for i in range(n):
            w.write({"x": i, "pad": b"p" * 20})


def _index(folder: Path) -> dict:
    return json.loads((folder / "index.json").read_text())


def _save_index(folder: Path, index: dict) -> None:
    (folder / "index.json").write_text(json.dumps(index))


def _ids(ds: StreamingDataset) -> list[int]:
    return [int(s["x"]) for s in ds]


def _run_capped(code: str, cap: int) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child whose every file write past ``cap`` bytes fails (EFBIG) instead of landing."""
    prelude = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({cap}, {cap}))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# --- bounded writes -----------------------------------------------------------------------------------------


def test_zstd_bomb_stops_at_the_declared_size(tmp_path):
    remote = tmp_path / "remote"
    _write(remote, compression="zstd")
    index = _index(remote)
    shard = index["shards"][0]
    bomb = zstandard.ZstdCompressor(level=3).compress(b"\0" * (64 << 20))  # 64 MiB of zeros, ~2 KB packed
    (remote / shard["zip_data"]["basename"]).write_bytes(bomb)
    shard["zip_data"]["bytes"] = len(bomb)  # a consistent hostile index: the packed size is right
    _save_index(remote, index)
    code = f"""
        from streaming import StreamingDataset
        from streaming.format.mds import ShardFormatError
        ds = StreamingDataset(remote={str(remote)!r}, local={str(tmp_path / "cache")!r}, batch_size=1,
                              cache_limit="1mb")
        try:
            list(ds)
        except ShardFormatError as err:
            print("REFUSED", err)
    """
    result = _run_capped(code, cap=4 << 20)  # any file past 4 MiB fails to write: before the fix, EFBIG
    assert "REFUSED" in result.stdout, result.stdout + result.stderr
    assert "declares" in result.stdout and str(shard["raw_data"]["bytes"]) in result.stdout
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and ".locks" not in p.parts]
    assert not [p for p in leftovers if ".tmp-" in p.name or p.name == shard["raw_data"]["basename"]]


@pytest.mark.parametrize("family", ["zstd", "gz", "bz2", "br", "snappy"])
def test_every_codec_stops_at_max_bytes(family):
    import io

    from streaming.format.compression import get_compression
    from streaming.util.sizes import SizeLimitExceeded

    codec = get_compression(family)
    packed = codec.compress(b"z" * (3 << 20))

    class Counting(io.BytesIO):
        def write(self, b):  # type: ignore[override]
            assert self.tell() + len(b) <= 1000, "wrote past the bound"
            return super().write(b)

    with pytest.raises(SizeLimitExceeded):
        codec.decompress_file(io.BytesIO(packed), Counting(), max_bytes=1000)
    with pytest.raises(SizeLimitExceeded):
        codec.decompress(packed, max_bytes=1000)
    assert codec.decompress(packed, max_bytes=3 << 20) == b"z" * (3 << 20)


def test_raw_shard_larger_than_declared_over_s3_is_refused_unread(s3_bucket, s3_env, tmp_path):
    local_copy = tmp_path / "src"
    _write(local_copy)
    index = _index(local_copy)
    name = index["shards"][0]["raw_data"]["basename"]
    big = (local_copy / name).read_bytes() + b"\0" * (8 << 20)  # what the index declares, then 8 MiB more
    client = boto3.client("s3", endpoint_url=s3_env)
    bucket = s3_bucket.removeprefix("s3://")
    client.put_object(Bucket=bucket, Key="ds/index.json", Body=json.dumps(index).encode())
    client.put_object(Bucket=bucket, Key=f"ds/{name}", Body=big)
    ds = StreamingDataset(remote=f"{s3_bucket}/ds", local=str(tmp_path / "cache"), batch_size=1)
    with pytest.raises(
        ShardFormatError, match=rf"larger than the {index['shards'][0]['raw_data']['bytes']} bytes"
    ):
        list(ds)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(name)]


def test_download_stops_at_max_bytes_even_when_the_size_is_not_stated(tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(b"x" * 5000)
    dst = tmp_path / "out" / "big.bin"
    from streaming.util.sizes import SizeLimitExceeded

    with pytest.raises(SizeLimitExceeded, match="more than 1000 bytes"):
        download_file(str(src), str(dst), max_bytes=1000)
    assert not dst.exists() and not list(dst.parent.glob("*.tmp-*"))
    download_file(str(src), str(dst), max_bytes=5000)
    assert dst.read_bytes() == b"x" * 5000
    if can_download_to_memory():
        with pytest.raises(SizeLimitExceeded):
            download_to_memory(str(src), max_bytes=4999)
        assert bytes(download_to_memory(str(src), max_bytes=5000)) == b"x" * 5000


# --- symbolic links -----------------------------------------------------------------------------------------


def test_a_planted_folder_link_is_never_written_or_deleted_through(tmp_path):
    """The reproduction: local/sub -> an outside folder, a hostile index naming sub/<victim>, validate_hash."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "notes.txt"
    victim.write_bytes(b"precious")
    remote = tmp_path / "remote"
    (remote / "sub").mkdir(parents=True)
    _write(tmp_path / "tmp_ds", hashes=["sha1"])
    index = _index(tmp_path / "tmp_ds")
    shard = index["shards"][0]
    os.replace(tmp_path / "tmp_ds" / shard["raw_data"]["basename"], remote / "sub" / "notes.txt")
    shard["raw_data"]["basename"] = "sub/notes.txt"
    index["shards"] = [shard]
    _save_index(remote, index)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "sub").symlink_to(outside)
    ds = StreamingDataset(remote=str(remote), local=str(cache), batch_size=1, validate_hash="sha1")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        list(ds)
    assert victim.read_bytes() == b"precious"
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]


def test_a_linked_lock_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    remote = tmp_path / "remote"
    _write(remote)
    cache = tmp_path / "cache"
    cache.mkdir()
    (tmp_path / ".cache.locks").symlink_to(outside)  # the lock folder: cache's hidden sibling
    with pytest.raises(UnsafePathError, match="symbolic link"):
        list(StreamingDataset(remote=str(remote), local=str(cache), batch_size=1))
    assert list(outside.iterdir()) == []


def test_eviction_never_deletes_through_a_link(tmp_path):
    from streaming.cache.space import _delete

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.mds").write_bytes(b"keep")
    root = tmp_path / "cache"
    root.mkdir()
    (root / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        _delete(str(root), [str(root / "sub" / "x.mds")])
    assert (outside / "x.mds").read_bytes() == b"keep"
    (root / "link.mds").symlink_to(outside / "x.mds")  # a link as the file itself: only the link goes
    assert _delete(str(root), [str(root / "link.mds")]) > 0
    assert (outside / "x.mds").read_bytes() == b"keep" and not (root / "link.mds").is_symlink()


def test_the_root_itself_may_be_a_link(tmp_path):
    remote = tmp_path / "remote"
    _write(remote)
    real = tmp_path / "big_disk"
    real.mkdir()
    (tmp_path / "cache").symlink_to(real)
    assert _ids(StreamingDataset(remote=str(remote), local=str(tmp_path / "cache"), batch_size=1)) == list(
        range(53)
    )


# --- wrong data accepted ------------------------------------------------------------------------------------


def _flip_one_bit(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_digests_are_verified_by_default_locally(tmp_path, compression):
    ds_dir = tmp_path / "ds"
    with MDSWriter(
        out=str(ds_dir),
        columns={"x": "int", "pad": "bytes"},
        compression=compression,
        hashes=["sha1", "xxh64"],
    ) as w:
        for i in range(53):
            w.write(
                {"x": i, "pad": random.Random(i).randbytes(40)}
            )  # incompressible: zstd keeps them literal
    shard = _index(ds_dir)["shards"][0]
    stored = ds_dir / shard["zip_data" if compression else "raw_data"]["basename"]
    _flip_one_bit(stored, at=len(stored.read_bytes()) // 2)
    off = StreamingDataset(local=str(ds_dir), batch_size=1, validate_hash="off", shuffle=False)
    assert len(_ids(off)) == 53  # no error without the check: a wrong sample is served
    with pytest.raises(HashMismatchError, match="xxh64"):
        list(StreamingDataset(local=str(tmp_path / "ds"), batch_size=1))


def test_digests_are_verified_by_default_over_s3(s3_bucket, s3_env, tmp_path):
    src = tmp_path / "src"
    _write(src, hashes=["xxh64"])
    shard = _index(src)["shards"][0]
    _flip_one_bit(src / shard["raw_data"]["basename"], at=-3)  # inside the last sample's payload
    client = boto3.client("s3", endpoint_url=s3_env)
    bucket = s3_bucket.removeprefix("s3://")
    for p in src.iterdir():
        client.put_object(Bucket=bucket, Key=f"ds/{p.name}", Body=p.read_bytes())
    with pytest.raises(HashMismatchError, match="xxh64"):
        list(StreamingDataset(remote=f"{s3_bucket}/ds", local=str(tmp_path / "cache"), batch_size=1))
    off = StreamingDataset(
        remote=f"{s3_bucket}/ds", local=str(tmp_path / "cache2"), batch_size=1, validate_hash="off"
    )
    assert len(_ids(off)) == 53  # the opt-out reads it (the flipped byte is padding)


def test_a_bit_flipped_in_a_cached_copy_is_caught_on_first_use(tmp_path):
    remote = tmp_path / "remote"
    _write(remote, hashes=["sha1"])
    cache = tmp_path / "cache"
    assert _ids(StreamingDataset(remote=str(remote), local=str(cache), batch_size=1)) == list(range(53))
    name = _index(remote)["shards"][0]["raw_data"]["basename"]
    _flip_one_bit(cache / name, at=-3)
    # the cached copy fails its check, so it is downloaded again from the good remote
    assert _ids(StreamingDataset(remote=str(remote), local=str(cache), batch_size=1)) == list(range(53))
    assert (cache / name).read_bytes() == (remote / name).read_bytes()


def test_validate_hash_settings():
    assert check_validate_hash(None) is None
    assert check_validate_hash(False) == check_validate_hash("off") == check_validate_hash("none") == HASH_OFF
    assert check_validate_hash("sha1") == "sha1"
    with pytest.raises(ValueError, match="validate_hash='sha2'"):
        check_validate_hash("sha2")
    assert hash_to_check(None, {"sha1", "xxh64"}) == "xxh64"  # the fastest recorded
    assert hash_to_check(None, set()) is None
    assert hash_to_check(HASH_OFF, {"sha1"}) is None
    assert hash_to_check("sha1", {"xxh64"}) == "sha1"


def test_zero_samples_for_a_non_empty_shard_is_refused(tmp_path):
    ds_dir = tmp_path / "ds"
    _write(ds_dir)
    index = _index(ds_dir)
    index["shards"][0]["samples"] = 0
    _save_index(ds_dir, index)
    with pytest.raises(IndexError_, match=r"'samples' is 0 but shard\.00000\.mds is \d+ bytes"):
        StreamingDataset(local=str(ds_dir), batch_size=1)


def test_sample_count_disagreeing_with_the_header_is_refused(tmp_path):
    ds_dir = tmp_path / "ds"
    _write(ds_dir)
    index = _index(ds_dir)
    index["shards"][0]["samples"] = 10
    _save_index(ds_dir, index)
    with pytest.raises(ShardFormatError, match="header says 53 samples but index.json says 10"):
        list(StreamingDataset(local=str(ds_dir), batch_size=1))
