"""scripts/bench/streaming_remote.py: the shaping proxy's pacing arithmetic and byte counts (fast), and a tiny
three-library run (slow, bench: needs the reference venvs, skipped cleanly without them)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench"
SCRIPT = BENCH / "streaming_remote.py"


def _proxy_module():
    spec = importlib.util.spec_from_file_location("_shaping_proxy", BENCH / "_shaping_proxy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_shaping_proxy"] = module
    spec.loader.exec_module(module)
    return module


def test_pace_delay_holds_the_sender_to_the_cap():
    m = _proxy_module()
    assert m.pace_delay(50_000_000, 0.0, 50e6) == pytest.approx(1.0)  # 50 MB sent at once: wait 1 s
    assert m.pace_delay(50_000_000, 0.4, 50e6) == pytest.approx(0.6)
    assert m.pace_delay(50_000_000, 2.0, 50e6) == 0.0  # behind the cap: no wait
    assert m.pace_delay(10**9, 0.0, 0) == 0.0  # no cap
    assert m.transfer_time(64 << 20, 0.03, 50e6) == pytest.approx(0.03 + (64 << 20) / 50e6)
    assert m.transfer_time(123, 0.03, 0) == 0.03


def test_pacing_a_stream_in_chunks_never_runs_ahead_of_the_cap():
    m = _proxy_module()
    clock, sent, rate = 0.0, 0, 1e6
    for chunk in [m.CHUNK] * 50:
        sent += chunk
        clock += m.pace_delay(sent, clock, rate)  # an instant link: all the time is the proxy's wait
        assert sent / clock <= rate * (1 + 1e-9)
    assert clock == pytest.approx(sent / rate)


def test_proxy_forwards_and_counts_body_bytes(tmp_path):
    """A plain HTTP server behind the proxy: the body arrives intact; requests, GETs and bytes are counted."""
    import http.server
    import threading

    m = _proxy_module()
    payload = os.urandom(300_000)
    (tmp_path / "blob").write_bytes(payload)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = lambda *a, **k: Quiet(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with m.ShapingProxy(
            f"http://127.0.0.1:{server.server_address[1]}", latency_s=0.0, mb_per_s=0
        ) as proxy:
            for _ in range(2):
                with urllib.request.urlopen(f"{proxy.url}/blob", timeout=10) as resp:
                    assert resp.read() == payload
            deadline = time.monotonic() + 60  # the proxy counts a request after its last byte went out
            while proxy.stats.requests < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = proxy.reset()
        assert (stats.requests, stats.gets, stats.body_bytes) == (2, 2, 2 * len(payload))
        assert proxy.stats.requests == 0
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ValueError, match="127.0.0.1"):
        m.ShapingProxy("http://example.com:80")


def test_the_proxy_sends_without_waiting_for_acks():
    """The proxy's client sockets have TCP_NODELAY: with Nagle's rule a small body written after its headers
    waited for the client's delayed ACK, ~40 ms a request on Linux loopback that no object store adds (it was
    in every figure before: 44 ms a 31 KB GET, 2.5 ms without)."""
    import socket

    m = _proxy_module()
    with m.ShapingProxy("http://127.0.0.1:9", latency_s=0.0, mb_per_s=0) as proxy:
        proxy.hold("/blob", b"x" * 1000, [("Content-Type", "application/octet-stream")])
        handler = proxy._server.RequestHandlerClass
        setup, nodelay = handler.setup, []

        def recording_setup(self):
            setup(self)
            nodelay.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        handler.setup = recording_setup
        with urllib.request.urlopen(f"{proxy.url}/blob", timeout=10) as resp:
            assert resp.read() == b"x" * 1000
    assert nodelay and all(nodelay)
    # a burst of connections is queued, not dropped (a dropped SYN is retried after 1 s)
    assert proxy._server.request_queue_size >= 1024


def test_byte_range_reads_single_ranges_as_http_does():
    m = _proxy_module()
    assert m.byte_range(None, 100) is None
    assert m.byte_range("bytes=0-9", 100) == (0, 10)
    assert m.byte_range("bytes=90-200", 100) == (90, 100)  # clipped to the object
    assert m.byte_range("bytes=40-", 100) == (40, 100)
    assert m.byte_range("bytes=-30", 100) == (70, 100)
    assert m.byte_range("bytes=-300", 100) == (0, 100)
    assert m.byte_range("bytes=100-", 100) == (0, 0)  # unsatisfiable
    assert m.byte_range("bytes=0-1,5-6", 100) is None  # several ranges: the whole object
    assert m.byte_range("items=0-1", 100) is None


def test_only_reads_of_the_object_itself_are_held():
    m = _proxy_module()
    assert m.is_plain_get("") and m.is_plain_get("x-id=GetObject")
    assert m.is_plain_get("AWSAccessKeyId=a&Signature=b%2F&Expires=1")  # a presigned URL (SigV2)
    assert m.is_plain_get(
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=c&X-Amz-Signature=d&x-id=GetObject"
    )
    assert not m.is_plain_get("tagging") and not m.is_plain_get("list-type=2&prefix=a")
    assert not m.is_plain_get("x-id=ListObjects")


def test_a_held_object_is_answered_by_the_proxy_with_ranges_paced_and_counted(tmp_path):
    """``hold``: given whole once, then GETs (ranges included) and HEADs are answered from memory with the
    origin's headers, counted like forwarded ones; a write drops what is held."""
    import http.client
    import http.server
    import threading

    m = _proxy_module()
    payload = os.urandom(200_000)
    (tmp_path / "blob").write_bytes(payload)
    origin_gets = []

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            origin_gets.append(self.path)
            super().do_GET()

    handler = lambda *a, **k: Quiet(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with m.ShapingProxy(
            f"http://127.0.0.1:{server.server_address[1]}", latency_s=0.0, mb_per_s=0
        ) as proxy:
            origin = f"http://127.0.0.1:{server.server_address[1]}/blob"
            with urllib.request.urlopen(origin, timeout=10) as resp:
                proxy.hold("/blob", resp.read(), [*resp.getheaders(), ("x-amz-checksum-crc32", "zQ2/Yg==")])
            assert origin_gets == ["/blob"]
            port = int(proxy.url.rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/blob", headers={"Range": "bytes=1000-1999"})
            resp = conn.getresponse()
            assert resp.status == 206 and resp.read() == payload[1000:2000]
            assert resp.getheader("Content-Range") == f"bytes 1000-1999/{len(payload)}"
            assert resp.getheader("Last-Modified")  # the origin's headers come along
            assert resp.getheader("x-amz-checksum-crc32") is None  # but not the whole object's checksum
            conn.request("GET", "/blob")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == payload
            assert resp.getheader("x-amz-checksum-crc32") == "zQ2/Yg=="
            conn.request("HEAD", "/blob")
            resp = conn.getresponse()
            assert resp.getheader("Content-Length") == str(len(payload)) and resp.read() == b""
            conn.request("GET", "/blob", headers={"Range": f"bytes={len(payload)}-"})
            resp = conn.getresponse()
            assert resp.status == 416
            resp.read()
            assert origin_gets == ["/blob"]  # nothing reached the origin
            deadline = time.monotonic() + 60
            while proxy.stats.requests < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = proxy.reset()
            assert (stats.requests, stats.gets, stats.held) == (4, 3, 4)
            assert stats.body_bytes == 1000 + len(payload)
            conn.request("DELETE", "/nothing")  # a write: what is held is dropped, requests go through again
            conn.getresponse().read()
            conn.request("GET", "/blob")
            assert conn.getresponse().read() == payload
            assert origin_gets == ["/blob", "/blob"]
            conn.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.bench
def test_tiny_three_library_run_prints_every_case_and_a_plot(tmp_path):
    pytest.importorskip("moto")
    pythons = ["/tmp/ref/venv-streaming/bin/python", "/tmp/ref/venv-litdata/bin/python"]
    if not all(os.path.exists(p) for p in pythons):
        pytest.skip("reference venvs /tmp/ref/venv-streaming and /tmp/ref/venv-litdata are not built")
    svg = tmp_path / "plot.svg"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "600", "--workers", "1", "--shard-mib", "1", "--repeats", "1",
         "--latency-ms", "5", "--mb-per-s", "200", "--svg", str(svg)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    cases = [r for r in rows if "library" in r]
    assert {r["library"] for r in cases} == {"ours", "streaming", "litdata"}
    for r in cases:
        assert r["samples"] == 600 and r["samples_per_s"] > 0 and r["first_batch_s"] > 0
        assert r["held_answers"] > 0, r  # the shards were answered by the proxy, at a range's own cost
        assert r["fetched_over_dataset"] >= 0.99, r  # the proxy saw at least the whole dataset go through
    (summary,) = [r for r in rows if r.get("summary")]
    assert summary["cases"][0]["workers"] == 1 and summary["machine"]["cores"]
    assert svg.read_text().startswith("<svg")
