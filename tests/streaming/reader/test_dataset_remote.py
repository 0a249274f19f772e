"""StreamingDataset over a loopback S3 server: identical samples to the local copy, one download per shard,
cache_limit respected, faults retried."""

from __future__ import annotations

import os
import re
from collections import Counter

import numpy as np

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from tests.streaming.storage.fault_proxy import FaultProxy

N = 400


def _write(out, compression=None):
    with MDSWriter(
        out=out, columns={"id": "int", "tokens": "ndarray:int32:16"}, size_limit=2000, compression=compression
    ) as w:
        for i in range(N):
            w.write({"id": i, "tokens": np.full(16, i, np.int32)})


def _ids(loader) -> list[int]:
    return [int(i) for batch in loader for i in batch["id"]]


class Recorder(FaultProxy):
    def __init__(self, target, fault=None):
        self.gets: Counter = Counter()
        self._fault = fault
        super().__init__(target, self._record)

    def _record(self, n, method, path):
        if method == "GET":
            self.gets[re.sub(r"\?.*", "", path).rsplit("/", 1)[-1]] += 1
        return self._fault(n, method, path) if self._fault else None


def test_remote_equals_local_with_shuffle_and_workers(s3_bucket, s3_env, tmp_path, monkeypatch):
    remote = f"{s3_bucket}/ds"
    _write(remote, compression="zstd")
    _write(str(tmp_path / "local_copy"), compression="zstd")
    kwargs = dict(batch_size=8, shuffle=True, shuffle_seed=3, num_canonical_nodes=2)
    expected = _ids(
        StreamingDataLoader(
            StreamingDataset(local=str(tmp_path / "local_copy"), **kwargs), batch_size=8, num_workers=2
        )
    )
    with Recorder(s3_env) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), **kwargs)
        got = _ids(StreamingDataLoader(ds, batch_size=8, num_workers=2))
    assert got == expected and sorted(got) == list(range(N))
    shard_gets = {k: v for k, v in proxy.gets.items() if k.startswith("shard.")}
    assert len(shard_gets) == len(ds.shards) and set(shard_gets.values()) == {1}, (
        "one download per shard per node"
    )


def test_a_loader_warms_the_storage_clients_before_its_workers_fork(s3_bucket, s3_env, tmp_path, monkeypatch):
    """Workers fork from a process that has loaded its store's client models (``Backend.warm``), even where
    that process read nothing remote itself (the index already cached)."""
    from streaming.storage.backends.s3 import S3Backend

    remote = f"{s3_bucket}/ds"
    _write(remote)
    StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=8)  # caches the index
    warmed: list[tuple[int, str]] = []
    monkeypatch.setattr(S3Backend, "warm", lambda self, url: warmed.append((os.getpid(), url)))
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=8)
    assert sorted(
        _ids(StreamingDataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork"))
    ) == (list(range(N)))
    assert warmed == [(os.getpid(), remote)]


def _shard_bytes(cache) -> int:
    """Bytes of shard files in ``cache``; the prefetch thread may evict one between listing and stat."""
    used = 0
    for name in os.listdir(cache):
        if name.startswith("shard."):
            try:
                used += os.path.getsize(cache / name)
            except FileNotFoundError:
                pass
    return used


def test_cache_limit_smaller_than_dataset(s3_bucket, s3_env, tmp_path, monkeypatch):
    remote = f"{s3_bucket}/ds"
    _write(remote)
    cache = tmp_path / "cache"
    largest = 2000
    limit = 5 * largest
    with Recorder(s3_env) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        ds = StreamingDataset(
            remote=remote,
            local=str(cache),
            batch_size=4,
            shuffle=False,
            cache_limit=limit,
            predownload=8,
            direct_first_batch=False,  # counts shard downloads only (direct reads: test_direct_read.py)
        )
        seen, peak = [], 0
        for sample in ds:
            seen.append(int(sample["id"]))
            peak = max(peak, _shard_bytes(cache))
    assert sorted(seen) == list(range(N))
    assert peak <= limit
    shard_gets = {k: v for k, v in proxy.gets.items() if k.startswith("shard.")}
    assert set(shard_gets.values()) == {1}, "a sequential epoch downloads each shard exactly once"


def test_transient_faults_during_epoch(s3_bucket, s3_env, tmp_path, monkeypatch):
    remote = f"{s3_bucket}/ds"
    _write(remote)
    with Recorder(s3_env, fault=lambda n, m, p: 503 if n % 4 == 0 else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        ds = StreamingDataset(
            remote=remote, local=str(tmp_path / "c"), batch_size=4, shuffle=True, download_retry=5
        )
        ids = [int(s["id"]) for s in ds]
    assert sorted(ids) == list(range(N))
    assert proxy.injected
