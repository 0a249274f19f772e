"""cache_limit is a ceiling at every moment: sampled while one or two readers run against a loopback S3
server, after a crash (shards and temp files left over the limit), and with every shard in use (an error,
not an overrun)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.cache import CachedShard, CacheTooSmallError, ShardCache
from streaming.format.index import load_index
from streaming.storage import RetryPolicy, download_file

N = 256  # 16 shards of 16 samples, ~66 KB each
SHARD = 16
POLICY = RetryPolicy(retries=2, timeout=10, initial_backoff=0.01)


def _write(out: str, compression: str | None = None) -> None:
    with MDSWriter(
        out=out, columns={"x": "int", "pad": "bytes"}, size_limit=SHARD * 4200, compression=compression
    ) as w:
        for i in range(N):
            w.write({"x": i, "pad": os.urandom(4096)})


def _cache_bytes(folder: str) -> int:
    """What the cache folder holds on disk: shard and temp files (not index.json or the lock folder)."""
    total = 0
    for dirpath, dirnames, files in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".locks"]
        for name in files:
            if name != "index.json":
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    pass
    return total


@contextmanager
def _peak(folder: str) -> Iterator[list[int]]:
    """Sample the folder's size every millisecond while the block runs; yields [peak]."""
    peak, stop = [0], threading.Event()

    def run() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _cache_bytes(folder))
            stop.wait(0.001)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def _shard_bytes(folder: str) -> int:
    return max(sum(f.bytes for f in s.files()) for s in load_index(folder).shards)


def test_one_reader_never_exceeds_the_limit(s3_bucket, s3_env, tmp_path):
    remote, local = f"{s3_bucket}/ds", str(tmp_path / "cache")
    _write(remote)
    download_file(f"{remote}/index.json", os.path.join(local, "index.json"))
    limit = 4 * _shard_bytes(local)  # the smallest StreamingDataset accepts
    ds = StreamingDataset(
        remote=remote,
        local=local,
        batch_size=8,
        shuffle=True,  # each batch spans a few shards: the next batch's are prefetched in parallel
        shuffle_block_size=3 * SHARD,
        download_concurrency=4,
        cache_limit=limit,
    )
    with _peak(local) as peak:
        seen = [int(s["x"]) for s in ds]
    assert sorted(seen) == list(range(N))
    assert 0 < peak[0] <= limit, f"peak {peak[0]} bytes over cache_limit={limit}"


_READER = """
import sys
from streaming import StreamingDataset
remote, local, limit, shuffle = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
ds = StreamingDataset(remote=remote, local=local, batch_size=4, predownload=2 * 16, cache_limit=limit,
                      shuffle=shuffle, shuffle_block_size=4 * 16)
print(",".join(map(str, sorted(int(s["x"]) for s in ds))))
"""


def test_two_reader_processes_never_exceed_the_limit(s3_bucket, s3_env, tmp_path):
    remote, local = f"{s3_bucket}/ds", str(tmp_path / "cache")
    _write(remote)
    download_file(f"{remote}/index.json", os.path.join(local, "index.json"))
    limit = 8 * _shard_bytes(local)
    with _peak(local) as peak:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _READER, remote, local, str(limit), shuffle],
                stdout=subprocess.PIPE,
                text=True,
            )
            for shuffle in ("0", "1")  # one in order, one shuffled: different shards at once
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [",".join(map(str, range(N))) + "\n"] * 2
    assert 0 < peak[0] <= limit, f"peak {peak[0]} bytes over cache_limit={limit}"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _shards(remote: str, local: str) -> list[CachedShard]:
    download_file(f"{remote}/index.json", os.path.join(local, "index.json"))
    return [CachedShard(local=local, remote=remote, info=s) for s in load_index(local).shards]


def test_next_start_brings_a_crashed_cache_under_the_limit(s3_bucket, s3_env, tmp_path):
    remote, local = f"{s3_bucket}/ds", str(tmp_path / "cache")
    _write(remote)
    shards = _shards(remote, local)
    for s in shards:  # a run without a limit (or killed mid-eviction) left every shard ...
        name = s.info.raw_data.basename
        download_file(f"{remote}/{name}", os.path.join(local, name), policy=POLICY)
    stale = os.path.join(local, shards[3].info.raw_data.basename + f".tmp-{_dead_pid()}-0")
    with open(stale, "wb") as f:  # ... and a half-written download of a process killed with -9
        f.write(b"x" * 50_000)
    limit = 4 * max(s.peak_bytes for s in shards)
    assert _cache_bytes(local) > limit
    cache = ShardCache(shards=shards, cache_limit=limit, policy=POLICY)
    cache.prepare(0)  # already present: no download, but the first use checks the cache
    assert not os.path.exists(stale)
    assert _cache_bytes(local) <= limit
    assert cache.downloads == 0


def test_every_shard_in_use_is_an_error_not_an_overrun(s3_bucket, s3_env, tmp_path):
    remote, local = f"{s3_bucket}/ds", str(tmp_path / "cache")
    _write(remote)
    shards = _shards(remote, local)
    limit = 3 * max(s.peak_bytes for s in shards)
    other = ShardCache(shards=shards, cache_limit=limit, policy=POLICY, concurrent=1)  # another reader
    for k in range(3):
        other.prepare(k)
        assert other.pin(k)
    cache = ShardCache(shards=shards, cache_limit=limit, policy=POLICY, concurrent=1, wait_timeout=0.3)
    assert cache.prepare(3, wait=False) is False, "a prefetch gives up at once when the cache is full"
    with pytest.raises(
        CacheTooSmallError, match=r"cache_limit=\d+ bytes .*cannot fit shard .*raise cache_limit"
    ):
        cache.prepare(3)
    assert _cache_bytes(local) <= limit
    other.unpin(0)
    assert cache.prepare(3) is True
    assert not os.path.exists(os.path.join(local, shards[0].info.raw_data.basename)), (
        "the released shard went"
    )
    assert all(os.path.exists(os.path.join(local, shards[k].info.raw_data.basename)) for k in (1, 2, 3))
    assert _cache_bytes(local) <= limit


def test_a_file_renamed_into_place_during_the_scan_is_still_counted(tmp_path, monkeypatch):
    """A preparer may rename its temp file into place and release its reservation while another process scans
    the disk: the scan lists the temp name, finds it gone, and never sees the final name. The reservation,
    read before the scan, must still count those bytes (the other order granted one shard too many)."""
    from streaming.cache import space
    from streaming.cache.locks import file_lock, lock_dir, prep_lock

    folder = str(tmp_path)
    names = ["shard.00000.mds", "shard.00001.mds"]
    paths = [os.path.join(folder, n) for n in names]
    tmp = f"{paths[0]}.tmp-{os.getpid()}-0"
    with open(tmp, "wb") as f:
        f.write(b"x" * 1000)
    token = space.add_reservation(lock_dir(folder), 1000, [paths[0]])
    entries = {
        k: space.SpaceEntry(local=folder, lock_name=n, paths=(p,))
        for k, (n, p) in enumerate(zip(names, paths))
    }
    keeper = space.SpaceKeeper(folder, entries, 1500, 1.0)

    def scan_while_the_preparer_finishes(by_dir, **kwargs):  # lists the temp name, then finds it gone
        os.replace(tmp, paths[0])
        space.release_reservation(token)
        return space.DiskUsage(files={}, temps={})

    monkeypatch.setattr(space, "scan_usage", scan_while_the_preparer_finishes)
    with file_lock(folder, prep_lock(names[0])):  # the preparer of shard 0 (not evictable meanwhile)
        granted = keeper.reserve(1, 1000, [paths[1]], name=names[1], patience=0)
    assert granted is None, "1000 bytes on disk + 1000 more > cache_limit=1500"


def test_room_is_made_only_from_shards_needed_later(two_of_three_cached):
    """Farthest next use goes first, and never a shard needed sooner than the one room is made for: a prefetch
    gives up rather than evict what the reader needs first."""
    keeper, paths = two_of_three_cached

    def reserve(k: int, uses: dict[int, float]) -> str | None:
        return keeper.reserve(
            k, 1000, [paths[k]], name=f"shard {k}", next_use=uses.__getitem__, patience=0, ahead=True
        )

    assert reserve(2, {0: 5, 1: 10, 2: 7}) is not None  # shard 1 (needed at 10) goes, shard 0 (5) stays
    assert os.path.exists(paths[0]) and not os.path.exists(paths[1])
    with open(paths[2], "wb") as f:  # shard 2 prepared; its reservation (still live) now counts nothing more
        f.write(b"x" * 1000)
    assert reserve(1, {0: 5, 1: 8, 2: 7}) is None, "shards 0 (5) and 2 (7) are both needed before 8"
    assert reserve(1, {0: 5, 1: 6, 2: 7}) is not None, "shard 2 (7) is needed after 6"
    assert os.path.exists(paths[0]) and not os.path.exists(paths[2])
    assert reserve(2, {0: 5, 1: 6, 2: 7}) is None, "only shard 0 (5) is on disk, and the reservation for 1"
