"""streaming.reader.direct_read: the first batch read straight from the remote shards (issue 42)."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from streaming.format.mds import MDSSchema
from streaming.reader.direct_read import DirectReads, sample_span, table_bytes


def _write(out: str, sizes: list[int], size_limit: int = 1 << 20) -> None:
    with MDSWriter(out=out, columns={"id": "int", "blob": "bytes"}, size_limit=size_limit) as w:
        for i, n in enumerate(sizes):
            w.write({"id": i, "blob": bytes([i % 251]) * n})


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=40))
def test_sample_span_finds_every_sample_from_the_header(tmp_path_factory, sizes):
    """From the table bytes alone, every sample's span is where the reader finds it."""
    out = str(tmp_path_factory.mktemp("mds"))
    _write(out, sizes, size_limit=1 << 30)
    ds = StreamingDataset(local=out, batch_size=1)
    (info,) = ds.shards
    data = open(f"{out}/{info.raw_data.basename}", "rb").read()
    head = data[: table_bytes(info)]
    for k in range(len(sizes)):
        lo, hi = sample_span(head, info, k)
        raw = data[lo:hi]
        got = MDSSchema.from_config(info.config).decoder()(memoryview(raw))
        assert got["id"] == k and got["blob"] == bytes([k % 251]) * sizes[k]


def test_a_header_that_disagrees_with_the_index_is_refused(tmp_path):
    _write(str(tmp_path), [10, 20, 30], size_limit=1 << 30)
    (info,) = StreamingDataset(local=str(tmp_path), batch_size=1).shards
    head = bytearray(open(tmp_path / info.raw_data.basename, "rb").read()[: table_bytes(info)])
    assert sample_span(bytes(head), info, 2) is not None
    assert sample_span(bytes(head), info, 3) is None  # out of range
    assert sample_span(bytes(head[:-1]), info, 0) is None  # short
    bad = bytearray(head)
    bad[0] = 7  # sample count
    assert sample_span(bytes(bad), info, 0) is None
    bad = bytearray(head)
    bad[-4:] = (10**6).to_bytes(4, "little")  # last offset past the file's end
    assert sample_span(bytes(bad), info, 0) is None


def test_direct_reads_fetch_one_header_per_shard_and_fail_soft(tmp_path):
    _write(str(tmp_path), [100] * 5, size_limit=1 << 30)
    (info,) = StreamingDataset(local=str(tmp_path), batch_size=1).shards
    data = open(tmp_path / info.raw_data.basename, "rb").read()
    calls: list[tuple[int, int]] = []

    def read(start: int, end: int) -> bytes:
        calls.append((start, end))
        return data[start:end]

    reads = DirectReads(threads=4)
    try:
        futures = [reads.sample(0, info, k, read) for k in (4, 0, 2)]
        spans = [sample_span(data[: table_bytes(info)], info, k) for k in (4, 0, 2)]
        assert [f.result() for f in futures] == [data[lo:hi] for lo, hi in spans]
        assert calls.count((0, table_bytes(info))) == 1
        assert reads.sample(1, info, 0, lambda s, e: None).result() is None  # a failed read: None
    finally:
        reads.close()


def test_the_first_batch_arrives_before_any_shard_download(s3_bucket, s3_env, tmp_path, monkeypatch):
    """Every shard download is held at the proxy until the first batch has arrived: the batch's samples come
    from range reads of single samples, equal to the local copy's; then the epoch completes, each sample once,
    with few extra bytes."""
    from tests.streaming.storage.fault_proxy import FaultProxy

    remote = f"{s3_bucket}/ds"
    rng = np.random.default_rng(0)
    sizes = rng.integers(1000, 4000, size=400).tolist()
    _write(remote, sizes, size_limit=128 << 10)
    _write(str(tmp_path / "copy"), sizes, size_limit=128 << 10)
    first_arrived = threading.Event()
    held_downloads: list[str] = []
    released_unasked: list[str] = []
    small = 0

    def fault(n: int, method: str, path: str, headers: dict[str, str]) -> None:
        nonlocal small
        if method != "GET" or "/shard." not in path:
            return None
        span = headers.get("Range") or headers.get("range")
        if span is not None:
            lo, hi = (int(x) for x in span.removeprefix("bytes=").split("-"))
            if hi - lo + 1 <= 8192:  # a header or a sample
                small += 1
                return None
        if not first_arrived.is_set():
            held_downloads.append(path)
            if not first_arrived.wait(timeout=60):  # the first batch needed this download after all
                released_unasked.append(path)
        return None

    with FaultProxy(s3_env, fault, headers=True) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=16, shuffle=True)
        assert len(ds.shards) >= 4
        loader = StreamingDataLoader(ds, batch_size=16, num_workers=1)
        it = iter(loader)
        first = next(it)
        first_arrived.set()
        ids = [int(i) for i in first["id"]] + [int(i) for batch in it for i in batch["id"]]
    assert (
        held_downloads and not released_unasked
    )  # the downloads waited for the first batch, not it for them
    assert small >= 16  # a range per sample (and per shard header)
    assert sorted(ids) == list(range(400))
    copy = StreamingDataset(local=str(tmp_path / "copy"), batch_size=16)
    for k, i in enumerate(first["id"].tolist()):
        assert bytes(first["blob"][k]) == copy[i]["blob"]
