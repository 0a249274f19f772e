"""Shards are prepared ahead of use: the first sample waits only for its own shard's decompression."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from streaming import MDSWriter
from streaming.format.index import ShardInfo
from streaming.reader import stream as stream_module
from streaming.reader.dataset import StreamingDataset


def test_first_sample_waits_only_for_its_own_shard(tmp_path, monkeypatch):
    path = str(tmp_path / "z")
    with MDSWriter(out=path, columns={"id": "int", "s": "str"}, size_limit=200, compression="zstd") as w:
        for k in range(200):
            w.write({"id": k, "s": f"x{k}"})
    shards = [f for f in os.listdir(path) if f.endswith(".mds.zstd")]
    assert len(shards) > 10
    real = stream_module.decompress_shard
    done: list[str] = []
    lock = threading.Lock()

    def slow_decompress(dirname: str, info: ShardInfo, **kwargs: Any) -> None:
        with lock:
            later = bool(started)
            started.append(info.raw_data.basename)
        if later:  # every shard after the first one takes a while
            time.sleep(0.05)
        real(dirname, info, **kwargs)
        with lock:
            done.append(info.raw_data.basename)

    started: list[str] = []
    monkeypatch.setattr(stream_module, "decompress_shard", slow_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    it = iter(ds)
    first = next(it)
    # only the first sample's shard was started (not the whole first chunk's shards: they span several); the
    # sample may come from its raw file before that decompression has finished
    assert len(started) == 1 and len(done) <= 1
    ids = [first["id"]] + [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert sorted(done) == sorted(f.removesuffix(".zstd") for f in shards)  # each decompressed once


def test_pool_starts_after_the_first_sample(tmp_path, monkeypatch):
    """Pool threads compete with the reading thread once running: before the first sample is yielded only
    its own shard is prepared (by one pool thread, so the sample can be read from the front of its raw file
    while it is written); then the other shards are prepared in the background."""
    path = str(tmp_path / "z")
    with MDSWriter(out=path, columns={"id": "int"}, size_limit=200, compression="zstd") as w:
        for k in range(200):
            w.write({"id": k})
    real = stream_module.decompress_shard
    threads: list[str] = []
    lock = threading.Lock()

    def recording_decompress(dirname: str, info: ShardInfo, **kwargs: Any) -> None:
        with lock:
            threads.append(threading.current_thread().name)
        real(dirname, info, **kwargs)

    monkeypatch.setattr(stream_module, "decompress_shard", recording_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    before = threading.active_count()
    it = iter(ds)
    ids = [next(it)["id"]]
    assert threading.active_count() <= before + 1
    assert len(threads) == 1 and threads[0] != threading.current_thread().name
    ids += [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert len(threads) == len(ds.shards)  # each shard once
    assert any(name != threading.current_thread().name for name in threads)  # prepared ahead, in the pool


def test_workers_share_the_ranges_of_their_shard_downloads(s3_bucket, s3_env, tmp_path, monkeypatch):
    """Issue 42: each of 4 workers split every 4 MiB shard into 4 ranges of 1 MiB while preparing 4 shards at
    once: 64 requests in flight shared one link and every shard arrived at the end, so the first batch waited
    for the whole dataset. The workers of a rank now share the range budget (8): at most 2 ranges a shard."""
    from collections import Counter

    import numpy as np

    from streaming import StreamingDataLoader
    from streaming.storage.ranged import RangedConfig
    from tests.streaming.storage.fault_proxy import FaultProxy

    remote = f"{s3_bucket}/ds"
    row = np.arange(1024, dtype=np.int32)
    with MDSWriter(
        out=remote, columns={"id": "int", "tokens": "ndarray:int32:1024"}, size_limit=4 << 20
    ) as w:
        for i in range(3000):
            w.write({"id": i, "tokens": row})
    gets: Counter[str] = Counter()

    def record(n: int, method: str, path: str) -> None:
        if method == "GET":
            gets[path.split("?")[0].rsplit("/", 1)[-1]] += 1

    with FaultProxy(s3_env, record) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        ds = StreamingDataset(
            remote=remote,
            local=str(tmp_path / "cache"),
            batch_size=32,
            shuffle=True,
            direct_first_batch=False,
        )  # counts shard downloads only (direct reads: test_direct_read.py)
        loader = StreamingDataLoader(ds, batch_size=32, num_workers=4)
        ids = [int(i) for batch in loader for i in batch["id"]]
    assert sorted(ids) == list(range(3000))
    shard_gets = {k: v for k, v in gets.items() if k.startswith("shard.")}
    assert len(shard_gets) == len(ds.shards) >= 2
    assert all(ds.shards[k].raw_data.bytes >= 3 * RangedConfig().min_part_bytes for k in range(2))
    assert max(shard_gets.values()) <= RangedConfig().concurrency // 4, shard_gets
