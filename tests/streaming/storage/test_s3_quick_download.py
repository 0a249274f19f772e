"""S3 whole-object downloads through a presigned URL on a plain urllib3 pool (``S3Backend._quick_download``),
against the loopback S3 server behind the fault proxy: the request it makes, what it refuses and where it
falls back to botocore's own request."""

from __future__ import annotations

import gzip
import os

import pytest

from streaming.storage import RetryPolicy, download_file
from streaming.storage.errors import TransientStorageError
from streaming.util.sizes import SizeLimitExceeded
from tests.streaming.storage.fault_proxy import FaultProxy

boto3 = pytest.importorskip("boto3")

FAST = RetryPolicy(retries=2, timeout=5, initial_backoff=0.01, max_backoff=0.05)


def _put(bucket_url: str, key: str, data: bytes, endpoint: str, **extra: str) -> None:
    boto3.client("s3", endpoint_url=endpoint).put_object(Bucket=bucket_url[5:], Key=key, Body=data, **extra)


def _presigned(path: str) -> bool:
    return "Signature=" in path  # in the query: SigV4's X-Amz-Signature (SigV2's was Signature)


def test_a_download_is_one_presigned_get(s3_bucket, s3_env, tmp_path, monkeypatch):
    """One GET, signed in its query with SigV4 (not in botocore's headers), and the bytes exactly as stored."""
    payload = os.urandom(70_000)
    _put(s3_bucket, "k.bin", payload, s3_env)
    seen: list[str] = []
    with FaultProxy(s3_env, lambda n, m, p: seen.append(p)) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        download_file(f"{s3_bucket}/k.bin", str(tmp_path / "k.bin"), policy=FAST)
    assert (tmp_path / "k.bin").read_bytes() == payload
    assert len(seen) == 1 and "X-Amz-Signature=" in seen[0] and "X-Amz-Algorithm=AWS4-HMAC-SHA256" in seen[0]


def test_stored_encoding_is_kept(s3_bucket, s3_env, tmp_path):
    """An object stored with Content-Encoding: gzip comes down as stored, as botocore's request gives it (the
    plain pool would decode it by default)."""
    packed = gzip.compress(b"hello " * 1000)
    _put(s3_bucket, "g.bin", packed, s3_env, ContentEncoding="gzip")
    download_file(f"{s3_bucket}/g.bin", str(tmp_path / "g.bin"), policy=FAST)
    assert (tmp_path / "g.bin").read_bytes() == packed


def test_past_max_bytes_is_refused_before_the_body(s3_bucket, s3_env, tmp_path):
    _put(s3_bucket, "big.bin", os.urandom(5000), s3_env)
    with pytest.raises(SizeLimitExceeded):
        download_file(f"{s3_bucket}/big.bin", str(tmp_path / "big.bin"), policy=FAST, max_bytes=1000)
    assert not (tmp_path / "big.bin").exists()


def test_missing_object_is_one_request(s3_bucket, s3_env, tmp_path, monkeypatch):
    with FaultProxy(s3_env, lambda n, m, p: None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(FileNotFoundError, match=r"nope\.bin: not found \(NoSuchKey\)"):
            download_file(f"{s3_bucket}/nope.bin", str(tmp_path / "x"), policy=FAST)
    assert proxy.count == 1


def test_a_refused_presigned_get_falls_back_to_botocore_for_the_bucket(
    s3_bucket, s3_env, tmp_path, monkeypatch
):
    """A store that refuses the presigned request (403 here; say, one that does not take query signatures):
    botocore's request downloads it, and the bucket's next downloads skip the presigned one."""
    _put(s3_bucket, "a.bin", b"a" * 3000, s3_env)
    _put(s3_bucket, "b.bin", b"b" * 3000, s3_env)
    paths: list[str] = []

    def fault(n, method, path):
        paths.append(path)
        return 403 if _presigned(path) else None

    from streaming.storage.backends import get_backend

    with FaultProxy(s3_env, fault) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        backend = get_backend(f"{s3_bucket}/a.bin")
        backend.download(f"{s3_bucket}/a.bin", str(tmp_path / "a.bin"), timeout=5)
        backend.download(f"{s3_bucket}/b.bin", str(tmp_path / "b.bin"), timeout=5)
    assert (tmp_path / "a.bin").read_bytes() == b"a" * 3000
    assert (tmp_path / "b.bin").read_bytes() == b"b" * 3000
    assert [_presigned(p) for p in paths] == [True, False, False]


@pytest.mark.parametrize("fault", [503, "reset"])
def test_transient_answers_are_retried_without_a_second_request(
    s3_bucket, s3_env, tmp_path, monkeypatch, fault
):
    """A 503 or a reset is the transfer layer's to retry (one request an attempt, the presigned path kept)."""
    _put(s3_bucket, "t.bin", b"t" * 3000, s3_env)
    paths: list[str] = []

    def inject(n, method, path):
        paths.append(path)
        return fault if n == 1 else None

    with FaultProxy(s3_env, inject) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        download_file(f"{s3_bucket}/t.bin", str(tmp_path / "t.bin"), policy=FAST)
    assert (tmp_path / "t.bin").read_bytes() == b"t" * 3000
    assert len(paths) == 2 and all(_presigned(p) for p in paths)


def test_a_proxy_in_the_environment_uses_botocore(s3_bucket, s3_env, tmp_path, monkeypatch):
    """With HTTPS_PROXY set (botocore routes through it; the plain pool would not), no presigned request."""
    from streaming.storage.backends.s3 import S3Backend

    _put(s3_bucket, "p.bin", b"p" * 100, s3_env)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    backend = S3Backend()
    assert not backend._quick_download(
        f"{s3_bucket}/p.bin", str(tmp_path / "p.bin"), timeout=5, max_bytes=None
    )
    assert not (tmp_path / "p.bin").exists()


def test_retries_exhausted_names_the_status(s3_bucket, s3_env, tmp_path, monkeypatch):
    _put(s3_bucket, "k.bin", b"abc", s3_env)
    with FaultProxy(s3_env, lambda n, m, p: 503) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        with pytest.raises(TransientStorageError, match="HTTP 503"):
            download_file(f"{s3_bucket}/k.bin", str(tmp_path / "k.bin"), policy=FAST)
    assert proxy.count == 3


def test_a_presigned_url_follows_the_endpoint(s3_bucket, s3_env, tmp_path, monkeypatch):
    """The same URL read through another endpoint (the environment changed) is presigned for that endpoint,
    not served from the previous one's cached URL."""
    from streaming.storage.backends.s3 import S3Backend

    _put(s3_bucket, "e.bin", b"e" * 500, s3_env)
    backend = S3Backend()
    backend.download(f"{s3_bucket}/e.bin", str(tmp_path / "direct.bin"), timeout=5)
    seen: list[str] = []
    with FaultProxy(s3_env, lambda n, m, p: seen.append(p)) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        backend.download(f"{s3_bucket}/e.bin", str(tmp_path / "proxied.bin"), timeout=5)
    assert (tmp_path / "proxied.bin").read_bytes() == b"e" * 500
    assert len(seen) == 1 and _presigned(seen[0])
