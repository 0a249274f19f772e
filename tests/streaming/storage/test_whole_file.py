"""`open_url`: whole files through smart_open against real loopback stores (moto, GCS emulator, Azurite),
sharing the backends' clients: round trips, errors naming the redacted URL, credentials never shown."""

from __future__ import annotations

import functools
import http.server
import logging
import os
import sys
import threading
import uuid

import pytest

from streaming.storage import download_file, open_url, upload_file
from streaming.storage.errors import TransientStorageError

TEXT = "première ligne\nzweite Zeile\n"


@pytest.fixture(params=["local", "s3", "gcs", "azure"])
def store(request, tmp_path):
    """A writable prefix on each store (GCS and Azure skip when their SDK or emulator is absent)."""
    if request.param == "local":
        return str(tmp_path / "store")
    module, fixture = {
        "s3": ("boto3", "s3_bucket"),
        "gcs": ("google.cloud.storage", "gcs_bucket"),
        "azure": ("azure.storage.blob", "azure_container"),
    }[request.param]
    pytest.importorskip(module)
    return request.getfixturevalue(fixture)


def test_text_and_bytes_round_trip(store):
    with open_url(f"{store}/dir/a.txt", "w") as f:
        f.write(TEXT)
    with open_url(f"{store}/dir/a.txt", "r") as f:
        assert f.read() == TEXT
    data = os.urandom(300_000)
    with open_url(f"{store}/b.bin", "wb") as f:
        f.write(data)
    with open_url(f"{store}/b.bin") as f:
        assert f.read() == data


def test_same_objects_as_the_streaming_backends(store, tmp_path):
    """What open_url writes, download_file reads, and the other way round (one client configuration)."""
    with open_url(f"{store}/w.jsonl", "w") as f:
        f.write('{"text": "a"}\n')
    download_file(f"{store}/w.jsonl", str(tmp_path / "got.jsonl"))
    assert (tmp_path / "got.jsonl").read_text() == '{"text": "a"}\n'
    (tmp_path / "up.txt").write_text(TEXT, encoding="utf-8")
    upload_file(str(tmp_path / "up.txt"), f"{store}/up.txt")
    with open_url(f"{store}/up.txt", "r") as f:
        assert f.read() == TEXT


def test_missing_object_names_the_url(store):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"), open_url(f"{store}/nope.jsonl", "r") as f:
        f.read()


def test_failed_write_leaves_nothing(store):
    with pytest.raises(RuntimeError, match="boom"), open_url(f"{store}/half.txt", "w") as f:
        f.write("partial")
        raise RuntimeError("boom")
    with pytest.raises(FileNotFoundError), open_url(f"{store}/half.txt", "r") as f:
        f.read()


def test_s3_credentials_in_the_url_sign_requests_and_never_show(s3_bucket, caplog):
    """smart_open's `s3://<key id>:<secret>@bucket/key`: used to sign, masked in every message."""
    secret = "wJalr/XUtnFEMI+K7MDENG"  # a `/` in it defeats urlsplit, so redaction cannot rely on it
    url = f"s3://AKIDEXAMPLE:{secret}@{s3_bucket.removeprefix('s3://')}"
    caplog.set_level(logging.DEBUG, logger="smart_open")
    with open_url(f"{url}/ok.txt", "w") as f:
        f.write("signed")
    with open_url(f"{s3_bucket}/ok.txt", "r") as f:
        assert f.read() == "signed"
    with pytest.raises(FileNotFoundError) as err, open_url(f"{url}/missing.txt", "r") as f:
        f.read()
    message = str(err.value)
    assert f"s3://***@{s3_bucket.removeprefix('s3://')}/missing.txt" in message
    assert secret not in message and "AKIDEXAMPLE" not in message and err.value.__cause__ is None
    assert secret not in caplog.text


def test_redacted_query_in_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as err, open_url(_serve(tmp_path) + "/gone.txt?sig=s3cr3t", "r"):
        pass
    assert "gone.txt" in str(err.value) and "s3cr3t" not in str(err.value)


def _serve(root) -> str:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_http_reads_through_the_backend_and_refuses_writes(tmp_path):
    (tmp_path / "page.txt").write_text(TEXT, encoding="utf-8")
    base = _serve(tmp_path)
    with open_url(f"{base}/page.txt", "r") as f:
        assert f.read() == TEXT
    with pytest.raises(PermissionError, match="read only"):
        open_url(f"{base}/page.txt", "w")


def test_file_urls_and_local_paths(tmp_path):
    with open_url(f"file://{tmp_path}/new/x.txt", "w") as f:
        f.write(TEXT)
    assert (tmp_path / "new" / "x.txt").read_text(encoding="utf-8") == TEXT
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["x.txt"]  # no temporary left
    with open_url(str(tmp_path / "new" / "x.txt"), "rb") as f:
        assert f.read() == TEXT.encode()


def test_bad_arguments_say_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="mode must be one of"):
        open_url(str(tmp_path / "x"), "a")
    with pytest.raises(ValueError, match="binary"):
        open_url(str(tmp_path / "x"), "rb", encoding="utf-8")
    with pytest.raises(ValueError, match="unsupported URL scheme"):
        open_url("ftp://host/x", "r")


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` now raises ImportError
    monkeypatch.setenv("S3_ENDPOINT_URL", f"http://127.0.0.1:1/{uuid.uuid4().hex}")  # a fresh backend
    with pytest.raises(ImportError, match=r"foundry-stack\[s3\]"), open_url("s3://bucket/key", "r"):
        pass


def test_transient_failures_are_classified(monkeypatch):
    """A store that does not answer is a TransientStorageError naming the URL (the caller may retry)."""
    pytest.importorskip("boto3")
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(TransientStorageError, match="s3://b/k"), open_url("s3://b/k", "r", timeout=1) as f:
        f.read()
