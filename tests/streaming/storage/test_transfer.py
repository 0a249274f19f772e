"""Downloads and uploads against a real S3-compatible server on loopback, with injected faults."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from streaming.storage import RetryPolicy, download_file, list_files, redact, upload_file
from streaming.storage.errors import TransientStorageError
from streaming.storage.transfer import HashMismatchError
from tests.streaming.storage.fault_proxy import FaultProxy

boto3 = pytest.importorskip("boto3")  # the s3 extra (a dev dependency); absent on bare GPU machines

FAST = RetryPolicy(retries=3, timeout=5, initial_backoff=0.01, max_backoff=0.05)


def _put(bucket_url: str, key: str, data: bytes, endpoint: str) -> None:
    boto3.client("s3", endpoint_url=endpoint).put_object(Bucket=bucket_url[5:], Key=key, Body=data)


def test_round_trip_and_listing(s3_bucket, s3_env, tmp_path):
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(100_000))
    upload_file(str(src), f"{s3_bucket}/dir/a.bin", policy=FAST)
    upload_file(str(src), f"{s3_bucket}/dir/sub/b.bin", policy=FAST)
    download_file(f"{s3_bucket}/dir/a.bin", str(tmp_path / "out" / "a.bin"), policy=FAST)
    assert (tmp_path / "out" / "a.bin").read_bytes() == src.read_bytes()
    assert list_files(f"{s3_bucket}/dir/") == [f"{s3_bucket}/dir/a.bin", f"{s3_bucket}/dir/sub/b.bin"]


def test_missing_object_fails_at_once_with_url(s3_bucket, s3_env, tmp_path, monkeypatch):
    with FaultProxy(s3_env, lambda n, m, p: None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(FileNotFoundError, match=f"{s3_bucket}/nope.bin"):
            download_file(
                f"{s3_bucket}/nope.bin", str(tmp_path / "x"), policy=RetryPolicy(retries=5, initial_backoff=1)
            )
    assert proxy.count == 1, "a 404 must not be retried"
    assert os.listdir(tmp_path) == []


def test_transient_faults_are_retried_and_logged(s3_bucket, s3_env, tmp_path, monkeypatch, caplog):
    payload = os.urandom(50_000)
    _put(s3_bucket, "k.bin", payload, s3_env)

    def fault(n, method, path):
        return {1: 503, 2: "reset", 3: 500}.get(n)

    with FaultProxy(s3_env, fault) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with caplog.at_level(logging.WARNING, logger="streaming.storage"):
            download_file(f"{s3_bucket}/k.bin", str(tmp_path / "k.bin"), policy=FAST)
    assert (tmp_path / "k.bin").read_bytes() == payload
    assert len(proxy.injected) == 3
    retries = [r for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 3 and "k.bin" in retries[0].getMessage()


def test_timeout_is_retried(s3_bucket, s3_env, tmp_path, monkeypatch):
    """The first request stalls for 120 s; a 1 s timeout abandons it and the second request answers. The
    bound on the elapsed time is loose on purpose (a loaded CI machine): it only tells a retry from a wait."""
    _put(s3_bucket, "slow.bin", b"x" * 1000, s3_env)
    with FaultProxy(s3_env, lambda n, m, p: 120.0 if n == 1 else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        policy = RetryPolicy(retries=2, timeout=1, initial_backoff=0.01)
        start = time.monotonic()
        download_file(f"{s3_bucket}/slow.bin", str(tmp_path / "slow.bin"), policy=policy)
    assert (tmp_path / "slow.bin").read_bytes() == b"x" * 1000
    assert proxy.count >= 2 and [i[0] for i in proxy.injected] == [1]
    assert time.monotonic() - start < 60


def test_retries_exhausted(s3_bucket, s3_env, tmp_path, monkeypatch):
    _put(s3_bucket, "k.bin", b"abc", s3_env)
    with FaultProxy(s3_env, lambda n, m, p: 503) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(TransientStorageError, match="after 3 attempt"):
            download_file(
                f"{s3_bucket}/k.bin",
                str(tmp_path / "k.bin"),
                policy=RetryPolicy(retries=2, initial_backoff=0.01),
            )
    assert proxy.count == 3
    assert not os.listdir(tmp_path)


def test_hash_mismatch_redownloads_once_then_fails(s3_bucket, s3_env, tmp_path, caplog):
    from streaming.format.hashing import hash_bytes

    _put(s3_bucket, "h.bin", b"good", s3_env)
    download_file(
        f"{s3_bucket}/h.bin",
        str(tmp_path / "ok"),
        validate_hash="sha1",
        expected_hashes={"sha1": hash_bytes("sha1", b"good")},
        policy=FAST,
    )
    with caplog.at_level(logging.WARNING, logger="streaming.storage"):
        with pytest.raises(HashMismatchError, match="after two downloads"):
            download_file(
                f"{s3_bucket}/h.bin",
                str(tmp_path / "bad"),
                validate_hash="sha1",
                expected_hashes={"sha1": hash_bytes("sha1", b"bad")},
                policy=FAST,
            )
    assert any("downloading again" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "bad").exists()


def test_kill_mid_download_leaves_no_partial_file(s3_bucket, s3_env, tmp_path):
    payload = os.urandom(4 << 20)
    _put(s3_bucket, "big.bin", payload, s3_env)
    target = tmp_path / "big.bin"

    def stall(n, method, path):  # the object's GET hangs until the downloader is killed
        return 120.0 if method == "GET" and "big.bin" in path else None

    with FaultProxy(s3_env, stall) as proxy:
        env = dict(os.environ, S3_ENDPOINT_URL=proxy.url)
        code = (
            "from streaming.storage import download_file\n"
            f"download_file('{s3_bucket}/big.bin', {str(target)!r})\n"
        )
        child = subprocess.Popen([sys.executable, "-c", code], env=env)
        try:
            deadline = time.monotonic() + 60
            while not any("big.bin" in p for _, m, p, _ in proxy.injected if m == "GET"):
                assert child.poll() is None, "the downloader ended before its request reached the server"
                assert time.monotonic() < deadline, "the download never started"
                time.sleep(0.01)
            child.kill()  # the request is in flight: the kill lands mid-download
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == -9
    assert not target.exists()
    download_file(f"{s3_bucket}/big.bin", str(target), policy=FAST)
    assert target.read_bytes() == payload


def test_credentials_are_redacted():
    assert redact("https://user:pw@host.example/path?X-Amz-Signature=abc&x=1") == (
        "https://***@host.example/path?X-Amz-Signature=***&x=1"
    )
    assert redact("s3://bucket/key") == "s3://bucket/key"


def test_unsupported_scheme(tmp_path):
    with pytest.raises(ValueError, match="unsupported URL scheme 'ftp'"):
        download_file("ftp://host/x", str(tmp_path / "x"))


def _outage(seconds: float):
    """A fault function: every request fails with 503 for ``seconds`` from now (a store outage)."""
    until = time.monotonic() + seconds
    return lambda n, m, p: 503 if time.monotonic() < until else None


def test_an_outage_shorter_than_the_budget_is_ridden_out(s3_bucket, s3_env, tmp_path, monkeypatch):
    """Issue 27: 3 attempts in ~1.3 s died in a 25 s outage; retries now go by a time budget."""
    import random

    _put(s3_bucket, "k.bin", b"payload", s3_env)
    (tmp_path / "up.bin").write_bytes(b"up")
    state = random.getstate()
    policy = RetryPolicy(timeout=5, initial_backoff=0.05, max_backoff=0.4, budget=20)
    with FaultProxy(s3_env, _outage(2.5)) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        download_file(f"{s3_bucket}/k.bin", str(tmp_path / "k.bin"), policy=policy)
        proxy.fault = _outage(2.5)
        upload_file(str(tmp_path / "up.bin"), f"{s3_bucket}/up.bin", policy=policy)
    assert (tmp_path / "k.bin").read_bytes() == b"payload"
    assert len(proxy.injected) > 6, "each transfer waited the outage out"
    assert random.getstate() == state, "backoff jitter must not draw from the global RNG (a run's RNG state)"


def test_a_spent_budget_names_the_setting_and_the_error(s3_bucket, s3_env, tmp_path, monkeypatch):
    _put(s3_bucket, "k.bin", b"abc", s3_env)
    policy = RetryPolicy(
        timeout=5, initial_backoff=0.05, max_backoff=0.2, budget=2.0, setting="data.download_budget"
    )  # 2 s: under load the first request alone (a new boto3 client) has taken 1 s
    with FaultProxy(s3_env, lambda n, m, p: 503) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        start = time.monotonic()
        with pytest.raises(
            TransientStorageError,
            match=r"over \d+ s \(data.download_budget=2 s spent\).*(503|ServiceUnavailable)",
        ):
            download_file(f"{s3_bucket}/k.bin", str(tmp_path / "k.bin"), policy=policy)
    assert 1.9 < time.monotonic() - start < 60  # the budget is kept; the upper bound only catches a hang
    assert proxy.count >= 2 and not os.listdir(tmp_path)  # retried (how often in 2 s depends on the load)


def test_the_default_policy_retries_for_minutes():
    policy = RetryPolicy()
    assert policy.retries is None and policy.budget >= 120
