"""The first sample of an iteration is read from its shard's raw file while that file is still being written
(decompressed from zstd/gz/bz2, or downloaded from a loopback S3 server), and is the right sample; the rest of
the shard, checks and errors stay as before."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import numpy as np
import pytest

from streaming import MDSWriter, StreamingDataset
from streaming.format import compression as compression_module
from streaming.format.mds import ShardFormatError
from streaming.reader.growing_shard import GrowingFile
from streaming.storage.transfer import HashMismatchError

N = 300  # 4 KiB samples: one ~1.2 MB shard


def _write(out: str, compression: str | None = None, **kwargs: Any) -> None:
    with MDSWriter(
        out=out, columns={"id": "int", "x": "ndarray:int32:1024"}, compression=compression, **kwargs
    ) as w:
        for i in range(N):
            w.write({"id": i, "x": np.full(1024, i, np.int32)})


def _check(samples: list[dict[str, Any]]) -> None:
    assert [s["id"] for s in samples] == list(range(N))
    for s in samples:
        assert (s["x"] == s["id"]).all()


# ----- GrowingFile -----


def test_growing_file_reads_ranges_as_they_are_written(tmp_path):
    path = str(tmp_path / "f.tmp")
    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    growing, done, go = GrowingFile(), Future(), threading.Event()

    def writer() -> None:
        growing.announce(path)  # announced before the file exists
        go.wait(5)
        with open(path, "wb") as f:
            for k in range(0, len(data), 4096):
                f.write(data[k : k + 4096])
                f.flush()
                time.sleep(0.001)
        done.set_result(None)

    t = threading.Thread(target=writer)
    t.start()
    go.set()
    assert growing.read(60_000, 61_000, done) == data[60_000:61_000]
    assert growing.read(10, 20, done) == data[10:20]
    t.join()
    assert growing.read(0, 10, done) is None  # the writer's job is over: read the finished file instead
    growing.close()


def test_growing_file_follows_a_rewrite(tmp_path):
    """A retried download truncates its temp file and writes it again: reads never see a mix."""
    path = str(tmp_path / "f.tmp")
    growing, done = GrowingFile(), Future()
    with open(path, "wb") as f:
        f.write(b"a" * 100)
    growing.announce(path)
    assert growing.read(0, 100, done) == b"a" * 100
    with open(path, "wb") as f:  # truncated: nothing past 10 bytes until written again
        f.write(b"b" * 10)
    t = threading.Timer(0.05, lambda: open(path, "ab").write(b"b" * 90))
    t.start()
    assert growing.read(50, 100, done) == b"b" * 50
    t.join()
    growing.close()


# ----- local compressed shards -----


@pytest.mark.parametrize("codec", ["zstd", "gz", "bz2"])
def test_first_sample_comes_before_its_shard_is_decompressed(tmp_path, monkeypatch, codec):
    path = str(tmp_path / "d")
    _write(path, codec)
    raw = os.path.join(path, "shard.00000.mds")
    assert not os.path.exists(raw)  # only the compressed form is written
    real = compression_module.Compression.decompress_file
    release = threading.Event()

    class Stalling:
        """Writes to ``dst`` until 64 KiB are out, then waits for the test before writing more."""

        def __init__(self, dst: BinaryIO) -> None:
            self.dst, self.written = dst, 0

        def write(self, data: Any) -> int:
            if self.written >= 1 << 16 and not release.is_set():
                self.dst.flush()
                release.wait(10)
            self.written += len(data)
            return self.dst.write(data)

    def stalling(self: Any, src: BinaryIO, dst: BinaryIO, **kwargs: Any) -> int:
        return real(self, src, Stalling(dst), **kwargs)

    monkeypatch.setattr(compression_module.Compression, "decompress_file", stalling)
    it = iter(StreamingDataset(local=path, batch_size=4))
    try:
        first = next(it)
        early = not os.path.exists(raw)  # the writer cannot finish before `release`
    finally:
        release.set()
    assert early, "the first sample waited for the whole shard"
    _check([first, *it])
    assert os.path.getsize(raw) > N * 4096  # the shard was still decompressed whole, to its raw name


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[: len(b) // 2], "decompresses .* to .* bytes but index.json says"),
        (lambda b: b"garbage!" + b[8:], "cannot decompress"),
    ],
)
def test_damaged_compressed_shard_is_named(tmp_path, damage, message):
    path = str(tmp_path / "d")
    _write(path, "zstd")
    assert not os.path.exists(os.path.join(path, "shard.00000.mds"))
    packed = os.path.join(path, "shard.00000.mds.zstd")
    with open(packed, "rb") as f:
        data = f.read()
    with open(packed, "wb") as f:
        f.write(damage(data))
    with pytest.raises(ShardFormatError, match=f"shard.00000.mds.zstd: {message}"):
        list(StreamingDataset(local=path, batch_size=4))
    assert sorted(os.listdir(path)) == ["index.json", "shard.00000.mds.zstd"]  # no temp file left


# ----- remote shards -----


class HoldingProxy:
    """A loopback proxy in front of the S3 server: GETs of ``hold`` send ``after`` body bytes, then wait for
    ``release`` (or, with ``reset_first``, reset the connection on the first such GET)."""

    def __init__(self, target: str, hold: str, after: int, *, reset_first: bool = False) -> None:
        parts = urlsplit(target)
        assert parts.hostname == "127.0.0.1" and parts.port is not None, "loopback only"
        self.upstream = (parts.hostname, parts.port)
        self.hold, self.after, self.reset_first = hold, after, reset_first
        self.release = threading.Event()
        self.gets: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HoldingProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                held = self.command == "GET" and self.path.split("?")[0].endswith("/" + proxy.hold)
                if held:
                    proxy.gets.append(proxy.hold)
                    self.wfile.write(data[: proxy.after])
                    self.wfile.flush()
                    if proxy.reset_first and len(proxy.gets) == 1:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                        self.connection.close()
                        self.close_connection = True
                        return
                    proxy.release.wait(10)
                    data = data[proxy.after :]
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        return Handler


@pytest.mark.parametrize("cache_limit", [None, "20mb"])
def test_remote_first_sample_comes_before_its_shard_is_downloaded(
    s3_bucket, s3_env, tmp_path, monkeypatch, cache_limit
):
    """The growing-file path (``direct_first_batch=False``, or a store without range reads)."""
    remote = f"{s3_bucket}/ds"
    _write(remote)
    cache = str(tmp_path / "cache")
    # the S3 backend writes what arrives in 1 MiB pieces: hold the rest after the first piece
    with HoldingProxy(s3_env, "shard.00000.mds", after=(1 << 20) + 4096) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        it = iter(
            StreamingDataset(
                remote=remote, local=cache, batch_size=4, cache_limit=cache_limit, direct_first_batch=False
            )
        )
        try:
            first = next(it)
            early = not os.path.exists(os.path.join(cache, "shard.00000.mds"))  # held until `release`
        finally:
            proxy.release.set()
        assert early, "the first sample waited for the whole download"
        _check([first, *it])
    assert proxy.gets == ["shard.00000.mds"]  # downloaded once, as before
    assert os.path.getsize(os.path.join(cache, "shard.00000.mds")) > N * 4096


def test_remote_download_reset_mid_body_gives_the_right_first_sample(
    s3_bucket, s3_env, tmp_path, monkeypatch
):
    """The first attempt stops after 100 bytes (before the header ends): the sample comes from the retry."""
    remote = f"{s3_bucket}/ds"
    _write(remote)
    with HoldingProxy(s3_env, "shard.00000.mds", after=100, reset_first=True) as proxy:
        proxy.release.set()
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        _check(
            list(
                StreamingDataset(
                    remote=remote, local=str(tmp_path / "cache"), batch_size=4, direct_first_batch=False
                )
            )
        )
    assert proxy.gets == ["shard.00000.mds", "shard.00000.mds"]


def test_validate_hash_still_checks_before_the_first_sample(s3_bucket, s3_env, tmp_path):
    """With ``validate_hash`` the shard is hashed whole before any sample of it is used, as before."""
    import boto3

    remote = f"{s3_bucket}/ds"
    _write(remote, hashes=["sha1"])
    bucket = s3_bucket.removeprefix("s3://")
    client = boto3.client("s3", endpoint_url=s3_env)
    body = client.get_object(Bucket=bucket, Key="ds/shard.00000.mds")["Body"].read()
    client.put_object(Bucket=bucket, Key="ds/shard.00000.mds", Body=body[:-1] + bytes([body[-1] ^ 1]))
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=4, validate_hash="sha1")
    with pytest.raises(HashMismatchError, match="sha1"):
        next(iter(ds))


def test_first_sample_read_keeps_its_shard_from_eviction_until_the_read_ends(
    s3_bucket, s3_env, tmp_path, monkeypatch
):
    """With ``cache_limit``, the shard whose first sample is read while a pool thread downloads it holds its use
    lock (as a pin) from before the download until the read ends: once the download is done the shard is present,
    unpinned and not being prepared, and an eviction then would leave the bytes the read still has open
    uncounted."""
    from streaming.cache.locks import try_lock, use_lock
    from streaming.reader import shard_access

    remote = f"{s3_bucket}/ds"
    _write(remote)
    cache = str(tmp_path / "cache")
    real = shard_access.early_sample_bytes
    evictable: list[bool] = []

    def read_then_look(growing: GrowingFile, info: Any, index: int, done: Future[None]) -> bytes | None:
        out = real(growing, info, index, done)
        done.result()  # the download is over (its prepare lock released); the reader is still in its read
        with try_lock(cache, use_lock(info.raw_data.basename)) as free:  # what an eviction tries first
            evictable.append(free)
        return out

    monkeypatch.setattr(shard_access, "early_sample_bytes", read_then_look)
    _check(
        list(
            StreamingDataset(
                remote=remote, local=cache, batch_size=4, cache_limit="20mb", direct_first_batch=False
            )
        )
    )
    assert evictable == [False], "the shard could be evicted while its first sample was being read"
