"""The node-level shard cache against a loopback S3 server: one download per shard per node, eviction
within cache_limit, crash safety, local-only shards never evicted."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
from collections import Counter

import pytest

from streaming import LocalDataset, MDSWriter
from streaming.cache import CachedShard, CacheTooSmallError, ShardCache
from streaming.format.index import load_index
from streaming.storage import RetryPolicy, download_file
from tests.streaming.storage.fault_proxy import FaultProxy

POLICY = RetryPolicy(retries=2, timeout=10, initial_backoff=0.01)


def _remote_dataset(remote: str, n: int = 60, compression: str | None = None) -> None:
    with MDSWriter(
        out=remote, columns={"x": "int", "pad": "bytes"}, size_limit=1200, compression=compression
    ) as w:
        for i in range(n):
            w.write({"x": i, "pad": b"p" * 100})


def _shards(remote: str, local: str) -> list[CachedShard]:
    download_file(f"{remote}/index.json", os.path.join(local, "index.json"))
    return [CachedShard(local=local, remote=remote, info=s) for s in load_index(local).shards]


def _gets(proxy: FaultProxy) -> Counter:
    return Counter(
        re.sub(r"\?.*", "", path).rsplit("/", 1)[-1] for _, method, path in proxy.requests if method == "GET"
    )


class CountingProxy(FaultProxy):
    def __init__(self, target: str) -> None:
        self.requests: list[tuple[int, str, str]] = []
        super().__init__(target, self._record)

    def _record(self, n: int, method: str, path: str) -> None:
        self.requests.append((n, method, path))


def _prepare_all(remote: str, local: str, endpoint: str, order: list[int]) -> None:
    os.environ["S3_ENDPOINT_URL"] = endpoint
    cache = ShardCache(
        shards=[CachedShard(local=local, remote=remote, info=s) for s in load_index(local).shards],
        policy=POLICY,
    )
    for k in order:
        cache.prepare(k)


def test_one_download_per_shard_across_processes(s3_bucket, s3_env, tmp_path, monkeypatch):
    remote = f"{s3_bucket}/ds"
    _remote_dataset(remote, compression="zstd")
    local = str(tmp_path / "cache")
    shards = _shards(remote, local)
    with CountingProxy(s3_env) as proxy:
        ctx = mp.get_context("spawn")
        orders = [list(range(len(shards))), list(reversed(range(len(shards)))), list(range(len(shards)))]
        procs = [ctx.Process(target=_prepare_all, args=(remote, local, proxy.url, o)) for o in orders]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs)
    gets = _gets(proxy)
    assert len(gets) == len(shards) and set(gets.values()) == {1}, gets
    assert [s["x"] for s in LocalDataset(local)] == list(range(60))
    assert not [f for f in os.listdir(local) if f.endswith(".zstd")], (
        "zip forms are dropped after decompression"
    )


def test_cache_limit_bounds_disk_and_downloads(s3_bucket, s3_env, tmp_path, monkeypatch):
    remote = f"{s3_bucket}/ds"
    _remote_dataset(remote, n=120)
    local = str(tmp_path / "cache")
    shards = _shards(remote, local)
    limit = 3 * max(s.resident_bytes for s in shards)
    plan = list(range(len(shards))) * 2  # two passes in order
    with CountingProxy(s3_env) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        cache = ShardCache(shards=shards, cache_limit=limit, policy=POLICY, concurrent=1)
        for pos, k in enumerate(plan):

            def next_use(j: int, pos: int = pos) -> float:
                later = [p for p in range(pos + 1, len(plan)) if plan[p] == j]
                return later[0] if later else float("inf")

            cache.prepare(k, next_use=next_use)
            assert cache.usage() <= limit
            assert LocalDataset(local).shard_reader(k)[0]["x"] >= 0
    gets = _gets(proxy)
    assert cache.downloads == sum(gets.values())
    assert sum(gets.values()) == _belady_fetches(plan, [s.resident_bytes for s in shards], limit)
    assert sum(gets.values()) < len(plan), (
        "the shards still resident at the wrap-around are not fetched again"
    )


def _belady_fetches(plan: list[int], sizes: list[int], limit: int) -> int:
    """Fetch count of the optimal offline policy (farthest next use) on a byte budget."""
    resident: set[int] = set()
    fetches = 0
    for pos, k in enumerate(plan):
        if k in resident:
            continue

        def nxt(j: int, pos: int = pos) -> float:
            later = [p for p in range(pos + 1, len(plan)) if plan[p] == j]
            return later[0] if later else float("inf")

        for victim in sorted(resident, key=nxt, reverse=True):
            if sum(sizes[j] for j in resident) + sizes[k] <= limit:
                break
            resident.discard(victim)
        resident.add(k)
        fetches += 1
    return fetches


def test_cache_limit_too_small_states_minimum(s3_bucket, tmp_path):
    remote = f"{s3_bucket}/ds"
    _remote_dataset(remote)
    shards = _shards(remote, str(tmp_path / "c"))
    with pytest.raises(CacheTooSmallError, match=r"at least .* bytes"):
        ShardCache(shards=shards, cache_limit=100, concurrent=2)


def test_local_only_shards_are_never_evicted(tmp_path):
    local = str(tmp_path / "ds")
    _remote_dataset(local)
    shards = [CachedShard(local=local, remote=None, info=s) for s in load_index(local).shards]
    cache = ShardCache(shards=shards, cache_limit=sum(s.resident_bytes for s in shards) + 10_000)
    for k in range(len(shards)):
        cache.prepare(k)
    assert cache.usage() == 0 and all(ShardCache.is_present(s) for s in shards)
    os.remove(os.path.join(local, shards[0].info.raw_data.basename))
    with pytest.raises(FileNotFoundError, match="no remote"):
        cache.prepare(0)


def test_stale_temp_files_are_cleaned(s3_bucket, tmp_path):
    remote = f"{s3_bucket}/ds"
    _remote_dataset(remote)
    local = str(tmp_path / "c")
    shards = _shards(remote, local)
    stale = os.path.join(local, shards[0].info.raw_data.basename + ".tmp-99999-0")
    with open(stale, "wb") as f:
        f.write(b"partial")
    ShardCache(shards=shards, policy=POLICY).prepare(0)
    assert not os.path.exists(stale)
    assert LocalDataset(local).shard_reader(0)[0]["x"] == 0
