"""Shards are prepared ahead of use: the first sample waits only for its own shard's decompression."""

from __future__ import annotations

import os
import threading
import time

from streaming import MDSWriter
from streaming import stream as stream_module
from streaming.dataset import StreamingDataset
from streaming.format.index import ShardInfo


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

    def slow_decompress(dirname: str, info: ShardInfo) -> None:
        with lock:
            later = bool(done)
        if later:  # every shard after the first one takes a while
            time.sleep(0.05)
        real(dirname, info)
        with lock:
            done.append(info.raw_data.basename)

    monkeypatch.setattr(stream_module, "decompress_shard", slow_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    it = iter(ds)
    first = next(it)
    assert len(done) == 1  # not the whole first chunk's shards (they span several)
    ids = [first["id"]] + [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert sorted(done) == sorted(f.removesuffix(".zstd") for f in shards)  # each decompressed once


def test_pool_starts_after_the_first_sample(tmp_path, monkeypatch):
    """Pool threads compete with the reading thread once running: none starts before the first sample is
    yielded; then the other shards are prepared in the background."""
    path = str(tmp_path / "z")
    with MDSWriter(out=path, columns={"id": "int"}, size_limit=200, compression="zstd") as w:
        for k in range(200):
            w.write({"id": k})
    real = stream_module.decompress_shard
    threads: list[str] = []
    lock = threading.Lock()

    def recording_decompress(dirname: str, info: ShardInfo) -> None:
        with lock:
            threads.append(threading.current_thread().name)
        real(dirname, info)

    monkeypatch.setattr(stream_module, "decompress_shard", recording_decompress)
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True, predownload=64)
    before = threading.active_count()
    it = iter(ds)
    ids = [next(it)["id"]]
    assert threading.active_count() == before
    assert threads == [threading.current_thread().name]
    ids += [s["id"] for s in it]
    assert sorted(ids) == list(range(200))
    assert len(threads) == len(ds.shards)  # each shard once
    assert any(name != threading.current_thread().name for name in threads)  # prepared ahead, in the pool
