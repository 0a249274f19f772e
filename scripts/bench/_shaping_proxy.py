"""A loopback HTTP proxy that makes a local S3 server look like a remote one: latency and a bandwidth cap.

Design note: every request waits ``latency_s`` before it is forwarded (one round trip to a distant store), and
every response body is sent to the client no faster than ``mb_per_s`` on that client connection (a per-
connection cap, as object stores and long links behave: more connections, more bandwidth). The pacing is a
pure function (``pace_delay``: how long to hold the next chunk so that the bytes sent so far never run ahead
of the cap), tested without a clock. The proxy counts requests, GETs and the response-body bytes it sends
(``stats``), so a benchmark reports what each library fetched, range requests and retries included. Client
connections are kept alive (HTTP/1.1), so a library that reuses connections pays the connect cost once; each
handler thread keeps its own upstream connection. Loopback only; one thread per client connection.

Concurrency: one handler thread per client connection; the counters are updated under ``_lock``.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

CHUNK = 64 * 1024
"""Bytes relayed between two pacing checks."""


def pace_delay(sent: int, elapsed_s: float, bytes_per_s: float) -> float:
    """Seconds to wait before sending more, after ``sent`` bytes in ``elapsed_s`` seconds under a cap of
    ``bytes_per_s`` (0 or less: no cap): the time those bytes should have taken, minus the time they did."""
    if bytes_per_s <= 0:
        return 0.0
    return max(0.0, sent / bytes_per_s - elapsed_s)


def transfer_time(nbytes: int, latency_s: float, bytes_per_s: float) -> float:
    """The least time one request for ``nbytes`` takes through the proxy (latency, then paced body)."""
    return latency_s + (nbytes / bytes_per_s if bytes_per_s > 0 else 0.0)


@dataclass
class ProxyStats:
    """What went through the proxy since the last ``reset``."""

    requests: int = 0
    gets: int = 0
    body_bytes: int = 0
    connections: int = 0


class ShapingProxy:
    """``with ShapingProxy("http://127.0.0.1:port", latency_s=0.03, mb_per_s=50) as p:`` forward ``p.url``.

    Args:
        target: The upstream server (loopback only).
        latency_s: Added before each request is forwarded.
        mb_per_s: Cap on the response-body rate of one client connection, in 1e6 bytes/s (0: no cap).
    """

    def __init__(self, target: str, *, latency_s: float = 0.030, mb_per_s: float = 50.0) -> None:
        parts = urlsplit(target)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            raise ValueError(f"the shaping proxy only forwards to http://127.0.0.1:<port>, got {target}")
        self.host, self.port = parts.hostname, parts.port
        self.latency_s = latency_s
        self.bytes_per_s = mb_per_s * 1e6
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def reset(self) -> ProxyStats:
        """The counts so far; counting starts again from zero."""
        with self._lock:
            out, self.stats = self.stats, ProxyStats()
        return out

    def __enter__(self) -> ShapingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for key, value in deltas.items():
                setattr(self.stats, key, getattr(self.stats, key) + value)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None
            sent = 0

            def setup(self) -> None:
                super().setup()
                proxy._count(connections=1)

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
                for attempt in range(2):  # an idle upstream connection may have been closed by the server
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=60)
                    try:
                        self.upstream.request(self.command, self.path, body=body, headers=headers)
                        return self.upstream.getresponse()
                    except (ConnectionError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            def _relay(self) -> None:
                self.sent = 0
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy.latency_s > 0:
                    time.sleep(proxy.latency_s)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                headers["Host"] = f"{proxy.host}:{proxy.port}"
                resp = self._forward(headers, body)
                self.send_response(resp.status)
                size = resp.getheader("Content-Length")
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                data = b"" if size is not None else resp.read()
                self.send_header("Content-Length", size if size is not None else str(len(data)))
                self.end_headers()
                try:
                    self._send_body(resp, data, size)
                finally:
                    proxy._count(requests=1, gets=int(self.command == "GET"), body_bytes=self.sent)

            def _send_body(self, resp: http.client.HTTPResponse, data: bytes, size: str | None) -> None:
                sent, start = 0, time.perf_counter()
                while True:
                    chunk = data if size is None else resp.read(CHUNK)
                    if not chunk:
                        break
                    if self.command != "HEAD":
                        self.wfile.write(chunk)
                    sent += len(chunk)
                    self.sent = sent
                    delay = pace_delay(sent, time.perf_counter() - start, proxy.bytes_per_s)
                    if delay > 0:
                        time.sleep(delay)
                    if size is None:
                        break

            def _serve(self) -> None:
                try:
                    self._relay()
                except (ConnectionError, TimeoutError):  # the client went away mid-body (a cancelled read)
                    self.close_connection = True
                    if self.upstream is not None:  # its response may be half read
                        self.upstream.close()
                        self.upstream = None

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _serve

            def finish(self) -> None:
                if self.upstream is not None:
                    self.upstream.close()
                super().finish()

        return Handler
