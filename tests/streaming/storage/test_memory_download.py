"""``download_to_memory``: an object read whole into anonymous memory (never a file on disk), with the retries
and the hash check of ``download_file``; how a reader reads a shard the full cache cannot keep."""

from __future__ import annotations

import logging
import os

import pytest

from streaming.format.hashing import hash_bytes
from streaming.storage import RetryPolicy
from streaming.storage.transfer import HashMismatchError, can_download_to_memory, download_to_memory
from tests.streaming.storage.fault_proxy import FaultProxy

boto3 = pytest.importorskip("boto3")
pytestmark = pytest.mark.skipif(not can_download_to_memory(), reason="needs memfd_create (Linux)")

FAST = RetryPolicy(retries=3, timeout=5, initial_backoff=0.01, max_backoff=0.05)


def _put(bucket_url: str, key: str, data: bytes, endpoint: str) -> None:
    boto3.client("s3", endpoint_url=endpoint).put_object(Bucket=bucket_url[5:], Key=key, Body=data)


def test_retried_verified_and_nothing_on_disk(s3_bucket, s3_env, tmp_path, monkeypatch):
    payload = os.urandom(300_000)
    _put(s3_bucket, "k.bin", payload, s3_env)
    with FaultProxy(s3_env, lambda n, method, path: {1: 503, 2: "reset"}.get(n)) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        monkeypatch.chdir(tmp_path)
        got = download_to_memory(
            f"{s3_bucket}/k.bin",
            policy=FAST,
            validate_hash="sha1",
            expected_hashes={"sha1": hash_bytes("sha1", payload)},
        )
    assert bytes(got) == payload and len(proxy.injected) == 2
    assert os.listdir(tmp_path) == []


def test_a_local_path_and_an_empty_file(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "e").write_bytes(b"")
    assert bytes(download_to_memory(str(tmp_path / "a"))) == b"abc"
    assert bytes(download_to_memory(str(tmp_path / "e"))) == b""
    with pytest.raises(FileNotFoundError):
        download_to_memory(str(tmp_path / "missing"))


def test_hash_mismatch_downloads_again_once_then_fails(tmp_path, caplog):
    (tmp_path / "h").write_bytes(b"good")
    with caplog.at_level(logging.WARNING, logger="streaming.storage"):
        with pytest.raises(HashMismatchError, match="after two downloads"):
            download_to_memory(
                str(tmp_path / "h"),
                validate_hash="sha1",
                expected_hashes={"sha1": hash_bytes("sha1", b"bad")},
            )
    assert any("downloading again" in r.getMessage() for r in caplog.records)
