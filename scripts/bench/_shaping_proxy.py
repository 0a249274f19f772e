"""A loopback HTTP proxy that makes a local S3 server look like a remote one: latency and a bandwidth cap.

Design note: every request waits ``latency_s`` before it is forwarded (one round trip to a distant store), and
every response body is sent to the client no faster than ``mb_per_s`` on that client connection (a per-
connection cap, as object stores and long links behave: more connections, more bandwidth). The pacing is a
pure function (``pace_delay``: how long to hold the next chunk so that the bytes sent so far never run ahead
of the cap), tested without a clock. The proxy counts requests, GETs and the response-body bytes it sends
(``stats``), so a benchmark reports what each library fetched, range requests and retries included. Client
connections are kept alive (HTTP/1.1), so a library that reuses connections pays the connect cost once: a new
connection waits one more ``latency_s`` (the handshake's round trip) before its first request is read. Each
handler thread keeps its own upstream connection. Loopback only; one thread per client connection.

Two things a loopback server does that no object store does were in every figure before 2026-11-28 and are
off: Nagle's rule held a small body written after its headers until the client's delayed ACK (~40 ms a
request; ``disable_nagle_algorithm``), and socketserver's listen backlog of 5 dropped the SYNs of a burst of
new connections, whose clients retried after 1 s (``_Server.request_queue_size``).

Held objects (``hold``): moto, the loopback S3 server, copies a whole object to answer any range of it (a 64 MiB
object: 0.17 s whole, 0.5 s as eight 8 MiB ranges, parallel or not), so a library that reads in ranges paid the
server's CPU, not the network's price, on the shared 2-core machine. A real store serves a range at the range's
cost. The benchmark therefore holds each object it uploaded in the proxy's memory (fetched whole once, before
timing, with the origin's credentials) and answers GET/HEAD of a held path itself, ranges included
(``byte_range``), with moto's own headers, less the whole object's checksums (``x-amz-checksum-*``) on a range,
as S3 and moto answer one (with them, botocore computed a CRC32 over every range it read); latency, the
per-connection cap and the counts apply exactly as to forwarded requests. Any other request (a
listing, a write) is forwarded; a write or delete drops every held object.

Concurrency: one handler thread per client connection; the counters and the held objects are updated under
``_lock`` (a held object is immutable bytes, read without the lock once looked up).
"""

from __future__ import annotations

import http.client
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

CHUNK = 64 * 1024
"""Bytes relayed between two pacing checks."""

WHOLE_OBJECT_CHECKSUM = "x-amz-checksum-"
"""Headers that check a whole object: not sent with a range (S3 sends them for a whole object or part)."""


def pace_delay(sent: int, elapsed_s: float, bytes_per_s: float) -> float:
    """Seconds to wait before sending more, after ``sent`` bytes in ``elapsed_s`` seconds under a cap of
    ``bytes_per_s`` (0 or less: no cap): the time those bytes should have taken, minus the time they did."""
    if bytes_per_s <= 0:
        return 0.0
    return max(0.0, sent / bytes_per_s - elapsed_s)


def transfer_time(nbytes: int, latency_s: float, bytes_per_s: float) -> float:
    """The least time one request for ``nbytes`` takes through the proxy (latency, then paced body)."""
    return latency_s + (nbytes / bytes_per_s if bytes_per_s > 0 else 0.0)


_SIGNATURE_PARAMS = frozenset(
    {"AWSAccessKeyId", "Signature", "Expires", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date",
     "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}
)  # fmt: skip
"""Query parameters of a presigned URL (SigV2 and SigV4): they sign a request, they do not change it."""


def is_plain_get(query: str) -> bool:
    """Whether a GET/HEAD with this query string reads the object itself (no query, botocore's
    ``x-id=GetObject``, or a presigned URL's signature), not a sub-resource (``?tagging``, ``?list-type=2``)."""
    params = parse_qs(query, keep_blank_values=True)
    return all(k in _SIGNATURE_PARAMS or (k == "x-id" and v == ["GetObject"]) for k, v in params.items())


def byte_range(header: str | None, total: int) -> tuple[int, int] | None:
    """The ``[start, end)`` an HTTP ``Range`` header asks of a ``total``-byte object: ``None`` for the whole
    object (no header, or not a single ``bytes=`` range), ``(0, 0)`` for a range that cannot be satisfied.
    ``bytes=a-b`` (inclusive, clipped to the object), ``bytes=a-`` and the suffix form ``bytes=-n``."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes=") :].strip().partition("-")
    try:
        if not first:
            n = int(last)
            return (max(total - n, 0), total) if n > 0 and total else (0, 0)
        start = int(first)
        end = min(int(last) + 1, total) if last else total
    except ValueError:
        return None
    return (start, end) if start < end else (0, 0)


@dataclass(frozen=True)
class Held:
    """An object the proxy answers for itself: its bytes and the origin's headers for a whole GET."""

    body: bytes
    headers: tuple[tuple[str, str], ...]


_HOP = ("transfer-encoding", "connection", "content-length", "content-range", "date", "server")


@dataclass
class ProxyStats:
    """What went through the proxy since the last ``reset``."""

    requests: int = 0
    gets: int = 0
    body_bytes: int = 0
    connections: int = 0
    held: int = 0
    """Requests answered from a held object (see ``ShapingProxy.hold``)."""


class _Server(ThreadingHTTPServer):
    # an object store takes a burst of connections at once: with socketserver's default backlog of 5, the
    # SYNs past it were dropped and their clients retried after 1 s (a client opening 100 connections at
    # start, as eight DataLoader workers reading ranges do, waited 1 s for its first batch)
    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed its connection (a worker that exited, a cancelled read) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


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
        self._held: dict[str, Held] = {}
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def reset(self) -> ProxyStats:
        """The counts so far; counting starts again from zero."""
        with self._lock:
            out, self.stats = self.stats, ProxyStats()
        return out

    def hold(self, path: str, body: bytes, headers: Iterable[tuple[str, str]]) -> None:
        """Answer GET and HEAD of ``path`` (``/bucket/key``) from memory from now on: ``body`` and the headers the
        origin sent with it for a whole GET (fetched by the caller, who holds the credentials; see the note)."""
        kept = tuple((k, v) for k, v in headers if k.lower() not in _HOP)
        with self._lock:
            self._held[path] = Held(bytes(body), kept)

    def _held_object(self, command: str, target: str) -> Held | None:
        path, _, query = target.partition("?")
        with self._lock:
            if command not in ("GET", "HEAD"):
                self._held.clear()
                return None
            return self._held.get(path) if is_plain_get(query) else None

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
            # headers and body go out as written: with Nagle's rule a small body waited for the client's
            # delayed ACK of the headers (~40 ms a request on Linux loopback), which no store adds
            disable_nagle_algorithm = True
            upstream: http.client.HTTPConnection | None = None
            sent = 0

            def setup(self) -> None:
                super().setup()
                proxy._count(connections=1)
                if proxy.latency_s > 0:  # the TCP handshake: one more round trip before the first request
                    time.sleep(proxy.latency_s)

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
                held = proxy._held_object(self.command, self.path)
                if held is not None:
                    self._answer(held)
                    return
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

            def _answer(self, held: Held) -> None:
                total = len(held.body)
                span = byte_range(self.headers.get("Range"), total)
                if span == (0, 0):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{total}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    proxy._count(requests=1, gets=int(self.command == "GET"), held=1)
                    return
                start, end = span or (0, total)
                self.send_response(206 if span else 200)
                for key, value in held.headers:
                    if not (span and key.lower().startswith(WHOLE_OBJECT_CHECKSUM)):
                        self.send_header(key, value)
                if span:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{total}")
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                view = memoryview(held.body)[start:end] if self.command == "GET" else memoryview(b"")
                try:
                    self._pace(view[i : i + CHUNK] for i in range(0, len(view), CHUNK))
                finally:
                    proxy._count(requests=1, gets=int(self.command == "GET"), body_bytes=self.sent, held=1)

            def _pace(self, chunks: Iterator[memoryview]) -> None:
                sent, start = 0, time.perf_counter()
                for chunk in chunks:
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    self.sent = sent
                    delay = pace_delay(sent, time.perf_counter() - start, proxy.bytes_per_s)
                    if delay > 0:
                        time.sleep(delay)

            def _send_body(self, resp: http.client.HTTPResponse, data: bytes, size: str | None) -> None:
                if size is None:
                    self._pace(iter([memoryview(data)] if data else []))
                else:
                    self._pace(memoryview(c) for c in iter(lambda: resp.read(CHUNK), b""))

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
