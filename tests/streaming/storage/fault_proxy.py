"""A loopback HTTP proxy that injects faults in front of a real server: resets, 5xx, and delays.

Faults follow a deterministic schedule keyed by request number, so tests are reproducible. The proxy only
listens on and forwards to 127.0.0.1, handles a bounded number of requests, and stops with the test.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultProxy:
    """Forward to ``target`` (``http://127.0.0.1:port``), injecting faults.

    Args:
        target: The upstream server URL (loopback only).
        fault: ``fault(n, method, path) -> None | "reset" | int status | float delay seconds`` for request n
            (``fault(n, method, path, headers)`` with ``headers=True``: the request's headers too).
        max_requests: Refuse (503) after this many requests, so a runaway loop is bounded.
    """

    def __init__(self, target: str, fault, max_requests: int = 10_000, *, headers: bool = False) -> None:
        parts = urlsplit(target)
        assert parts.hostname == "127.0.0.1", "the fault proxy only forwards to loopback"
        self.host, self.port = parts.hostname, parts.port
        self.fault = fault
        self.with_headers = headers
        self.max_requests = max_requests
        self.count = 0
        self.injected: list[tuple[int, str, str, object]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else a small body waits ~40 ms for the client's delayed ACK

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.count += 1
                    n = proxy.count
                args = (
                    (n, self.command, self.path, dict(self.headers))
                    if proxy.with_headers
                    else (n, self.command, self.path)
                )
                action = proxy.fault(*args) if n <= proxy.max_requests else 503
                if action is not None:
                    proxy.injected.append((n, self.command, self.path, action))
                if action == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.connection.close()
                    self.close_connection = True
                    return
                if isinstance(action, int):
                    payload = b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"
                    self.send_response(action)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if isinstance(action, float):
                    time.sleep(action)
                conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.host}:{proxy.port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        return Handler
