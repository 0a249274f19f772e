"""Parallel byte-range downloads: the range plan (pure, property-tested), the in-order writer against a fake
store, and ranged shard downloads against a real S3 server on loopback (byte-identical; a failure in a range
leaves nothing under the real name)."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.storage import RetryPolicy, download_file
from streaming.storage.errors import TransientStorageError
from streaming.storage.ranged import (
    RangeBudget,
    RangedConfig,
    download_ranged,
    plan_part_bytes,
    shared_concurrency,
    split_ranges,
)
from streaming.util.sizes import SizeLimitExceeded
from tests.streaming.storage.fault_proxy import FaultProxy

SMALL = RangedConfig(concurrency=4, min_part_bytes=1000, max_part_bytes=4000)


@settings(deadline=None)
@given(st.integers(0, 10**7), st.data())
def test_split_ranges_cover_the_object_in_order_without_overlap(size, data):
    part = data.draw(st.integers(max(1, size // 2000), 10**6 + size))
    ranges = split_ranges(size, part)
    assert [r[0] for r in ranges] == list(range(0, size, part))
    assert all(0 < end - start <= part for start, end in ranges)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert (ranges[-1][1] if ranges else 0) == size
    assert all(end - start == part for start, end in ranges[:-1])


@settings(deadline=None)
@given(
    st.integers(0, 1 << 32),
    st.integers(1, 64),
    st.integers(1, 1 << 24),
    st.integers(0, 1 << 24),
)
def test_part_size_stays_within_bounds_and_uses_the_concurrency(size, concurrency, lo, extra):
    config = RangedConfig(concurrency=concurrency, min_part_bytes=lo, max_part_bytes=lo + extra)
    part = plan_part_bytes(size, config)
    if concurrency == 1 or size < 2 * lo:
        assert part is None
        return
    assert part is not None and lo <= part <= lo + extra
    n = -(-size // part)  # the number of ranges split_ranges makes
    assert n >= 2 or part >= size
    if part < lo + extra and part > lo:  # neither bound bites: the object is spread evenly over the ranges
        assert n <= concurrency


def test_config_refuses_nonsense():
    with pytest.raises(ValueError, match="concurrency"):
        RangedConfig(concurrency=0)
    with pytest.raises(ValueError, match="min_part_bytes"):
        RangedConfig(min_part_bytes=10, max_part_bytes=5)


_LEN = -1


def _store(payload: bytes, *, total: int | None = _LEN, short: int | None = None):
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def read(start: int, end: int) -> tuple[bytes, int | None]:
        with lock:
            calls.append((start, end))
        data = payload[start:end]
        if short is not None and start == short:
            data = data[:-1]
        return data, len(payload) if total == _LEN else total

    return read, calls


def test_ranged_writer_is_byte_identical_and_in_order(tmp_path):
    payload = os.urandom(30_500)  # 8 ranges of at most 4000 bytes, 4 in flight: the window slides
    read, calls = _store(payload)
    path = tmp_path / "out"
    assert download_ranged("s3://b/k", str(path), len(payload), read, SMALL)
    assert path.read_bytes() == payload
    assert sorted(calls) == split_ranges(len(payload), 4000)


def test_small_object_or_other_size_falls_back_to_a_whole_download(tmp_path):
    path = tmp_path / "out"
    read, calls = _store(b"x" * 1500)
    assert not download_ranged("s3://b/k", str(path), 1500, read, SMALL)  # under two minimum parts
    assert calls == [] and not path.exists()
    read, _ = _store(b"x" * 9000, total=8000)  # the store's object is smaller than declared
    assert not download_ranged("s3://b/k", str(path), 9000, read, SMALL)
    assert not path.exists()
    read, _ = _store(b"x" * 9000, total=None)  # the store ignored the range
    assert not download_ranged("s3://b/k", str(path), 9000, read, SMALL)


def test_larger_than_declared_is_refused_and_a_short_range_is_transient(tmp_path):
    read, _ = _store(b"x" * 9000, total=20_000)
    with pytest.raises(SizeLimitExceeded):
        download_ranged("s3://b/k", str(tmp_path / "a"), 9000, read, SMALL)
    read, _ = _store(b"x" * 9000, short=2250)  # ranges of 2250 bytes
    with pytest.raises(TransientStorageError, match="range 2250-"):
        download_ranged("s3://b/k", str(tmp_path / "b"), 9000, read, SMALL)


# ----- against a real S3 server -----

FAST = RetryPolicy(retries=0, timeout=5, initial_backoff=0.01, max_backoff=0.05)
PARTS = RangedConfig(concurrency=4, min_part_bytes=64 * 1024, max_part_bytes=64 * 1024)


def _put(bucket_url: str, key: str, data: bytes, endpoint: str) -> None:
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3", endpoint_url=endpoint).put_object(Bucket=bucket_url[5:], Key=key, Body=data)


def _gets(proxy: FaultProxy) -> int:
    return proxy.count


def test_ranged_download_from_s3_is_byte_identical(s3_bucket, s3_env, tmp_path, monkeypatch):
    payload = os.urandom(1_000_000)
    _put(s3_bucket, "shard.bin", payload, s3_env)
    seen: list[str] = []
    with FaultProxy(s3_env, lambda n, m, p: seen.append(m) or None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        out = tmp_path / "shard.bin"
        download_file(f"{s3_bucket}/shard.bin", str(out), policy=FAST, max_bytes=len(payload), ranged=PARTS)
    assert out.read_bytes() == payload
    assert seen.count("GET") == len(split_ranges(len(payload), 64 * 1024))  # 16 range requests, no HEAD
    assert os.listdir(tmp_path) == ["shard.bin"]


def test_ranged_download_with_a_wrong_declared_size_still_gets_the_object(s3_bucket, s3_env, tmp_path):
    payload = os.urandom(300_000)
    _put(s3_bucket, "shard.bin", payload, s3_env)
    out = tmp_path / "shard.bin"
    download_file(f"{s3_bucket}/shard.bin", str(out), policy=FAST, max_bytes=400_000, ranged=PARTS)
    assert out.read_bytes() == payload
    with pytest.raises(SizeLimitExceeded):
        download_file(
            f"{s3_bucket}/shard.bin", str(tmp_path / "x"), policy=FAST, max_bytes=200_000, ranged=PARTS
        )
    assert os.listdir(tmp_path) == ["shard.bin"]


def test_a_failure_in_a_range_leaves_no_file_under_the_real_name(s3_bucket, s3_env, tmp_path, monkeypatch):
    payload = os.urandom(1_000_000)
    _put(s3_bucket, "shard.bin", payload, s3_env)
    with FaultProxy(s3_env, lambda n, m, p: "reset" if n == 6 else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(TransientStorageError):
            download_file(
                f"{s3_bucket}/shard.bin", str(tmp_path / "shard.bin"), policy=FAST, max_bytes=len(payload),
                ranged=PARTS,
            )  # fmt: skip
    assert os.listdir(tmp_path) == []  # neither the real name nor a temp file


def test_a_failed_range_is_retried_to_a_correct_file(s3_bucket, s3_env, tmp_path, monkeypatch):
    payload = os.urandom(1_000_000)
    _put(s3_bucket, "shard.bin", payload, s3_env)
    with FaultProxy(s3_env, lambda n, m, p: 503 if n == 6 else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        policy = RetryPolicy(retries=2, timeout=5, initial_backoff=0.01, max_backoff=0.05)
        out = tmp_path / "shard.bin"
        download_file(f"{s3_bucket}/shard.bin", str(out), policy=policy, max_bytes=len(payload), ranged=PARTS)
    assert out.read_bytes() == payload
    assert os.listdir(tmp_path) == ["shard.bin"]


def test_parallel_first_use_builds_one_s3_client(s3_env, monkeypatch):
    """Range reads start together on a fresh backend (a forked worker's first shard): they must share one
    client, not build one each (8 racing builds cost seconds before the first sample)."""
    from streaming.storage.backends.s3 import S3Backend

    backend = S3Backend()
    real, builds = backend._build, []

    def slow_build(*args, **kwargs):
        builds.append(1)
        threading.Event().wait(0.05)  # widen the window in which a second thread could start a build
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "_build", slow_build)
    barrier = threading.Barrier(8)

    def first_use() -> object:
        barrier.wait()
        return backend.client(60.0, url="s3://b/k")

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1


@settings(deadline=None)
@given(st.integers(1, 64), st.integers(0, 100), st.integers(0, 16))
def test_shared_concurrency_is_an_even_share_of_at_least_one(budget, in_flight, sharers):
    share = shared_concurrency(budget, in_flight, sharers)
    assert share >= 1
    assert share == 1 or share * max(1, in_flight) * max(1, sharers) <= budget
    assert shared_concurrency(budget, 1, 1) == budget


def test_range_budget_splits_among_downloads_in_flight_and_sharers():
    budget = RangeBudget(RangedConfig(concurrency=8), sharers=2)
    with budget.lease() as first:
        assert first.concurrency == 4  # alone in this process, one of 2 processes
        with budget.lease() as second, budget.lease() as third:
            assert (second.concurrency, third.concurrency) == (2, 1)
    with budget.lease() as again:
        assert again.concurrency == 4 and again.min_part_bytes == RangedConfig().min_part_bytes
    with pytest.raises(ValueError, match="sharers"):
        RangeBudget(RangedConfig(), sharers=0)


def test_clients_share_one_parsed_service_model(s3_env):
    """Each client's session reads botocore's service model through one shared loader, so a second client
    (another timeout, or a forked worker's first) does not parse it again, and the loader's search path does
    not grow with every session."""
    from streaming.storage.backends.s3 import S3Backend, _data_loader

    backend = S3Backend()
    a, b = backend.client(5.0, url="s3://x/y"), S3Backend().client(7.0, url="s3://x/y")
    assert a is not b
    assert a.meta.service_model._service_description is b.meta.service_model._service_description
    paths = _data_loader().search_paths
    assert len(paths) == len(set(paths))


def test_a_forked_worker_builds_its_client_from_the_models_its_parent_warmed(s3_env):
    """``warm`` (called by ``StreamingDataLoader`` before its workers fork) parses botocore's models into the
    parent's shared loader, so a forked worker's first client (its backend is its own) reads no model file:
    0.12 -> 0.024 s of CPU a worker. Run in a child with a fresh loader, which other tests' clients have not
    warmed; its exit status is the worker's count of model files read."""
    import botocore.loaders

    from streaming.storage.backends.s3 import S3Backend, _data_loader

    pid = os.fork()
    if pid == 0:
        code = 100
        try:
            _data_loader.cache_clear()
            S3Backend().warm("s3://x/y")
            loads: list[str] = []
            read = botocore.loaders.JSONFileLoader.load_file

            def counted(self, path, *args, **kwargs):
                loads.append(path)
                return read(self, path, *args, **kwargs)

            botocore.loaders.JSONFileLoader.load_file = counted
            worker = os.fork()
            if worker == 0:
                try:
                    S3Backend().client(60.0, url="s3://x/y")
                finally:
                    os._exit(min(len(loads), 99))
            code = os.waitstatus_to_exitcode(os.waitpid(worker, 0)[1])
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_quick_reader_reads_exact_ranges_or_gives_none(s3_bucket, s3_env, monkeypatch):
    """``quick_reader`` (a presigned URL on a plain pool, for a first batch's samples): exactly the bytes
    asked, None for anything else (a missing object, a range past the end), and no quick reader at all where a
    proxy is configured (botocore would use it; the plain pool would not)."""
    import boto3

    from streaming.storage.backends.s3 import S3Backend

    payload = os.urandom(50_000)
    boto3.client("s3", endpoint_url=s3_env).put_object(Bucket=s3_bucket[5:], Key="q.bin", Body=payload)
    backend = S3Backend()
    read = backend.quick_reader(f"{s3_bucket}/q.bin", timeout=30)
    assert read is not None
    assert read(0, 10) == payload[:10] and read(49_000, 50_000) == payload[49_000:]
    assert read(49_000, 50_001) is None  # short: not what was asked
    missing = backend.quick_reader(f"{s3_bucket}/nope.bin", timeout=30)
    assert missing is not None and missing(0, 10) is None
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert backend.quick_reader(f"{s3_bucket}/q.bin", timeout=30) is None
