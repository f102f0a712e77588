"""HTTP plumbing shared by the fake API server and the scripted kubelet: JSON answers, chunked
streams, and the ways a stream ends (cleanly, cut half-way, or because the client hung up)."""

from __future__ import annotations

import json
import select
import socket
import sys
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSON = dict[str, Any]


@dataclass
class Fault:
    """A fault to inject: answer ``times`` matching requests with ``code``."""

    code: int
    times: int
    retry_after: int | None
    verb: str | None
    resource: str | None

    def applies(self, verb: str, resource: str) -> bool:
        return self.times > 0 and self.verb in (None, verb) and self.resource in (None, resource)


@dataclass(frozen=True)
class Request:
    """A request as RBAC sees it."""

    verb: str
    group: str
    resource: str  # "pods", "pods/log", "mpijobs"
    name: str | None
    namespace: str
    query: tuple[tuple[str, str], ...] = ()

    def param(self, key: str) -> str | None:
        return dict(self.query).get(key)


def send_cut(handler: BaseHTTPRequestHandler) -> None:
    """A 200 whose body breaks off half-way (the connection drops)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100")
    handler.end_headers()
    handler.wfile.write(b'{"kind": "Pod", "metad')
    abort(handler)


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (we drop streams on purpose, the backend closes them) are normal."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def send_json(
    handler: BaseHTTPRequestHandler, code: int, body: JSON, headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def start_chunked(handler: BaseHTTPRequestHandler, content_type: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()


def chunk(handler: BaseHTTPRequestHandler, text: str | bytes) -> bool:
    """Write one chunk; False when the client has gone away."""
    data = text.encode() if isinstance(text, str) else text
    try:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True
        return False
    return True


def end_chunked(handler: BaseHTTPRequestHandler) -> None:
    try:
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


def client_gone(handler: BaseHTTPRequestHandler) -> bool:
    """The client closed the connection (it sends nothing else while a watch streams)."""
    connection = handler.connection
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def abort(handler: BaseHTTPRequestHandler) -> None:
    """Drop the connection without ending the chunked body: the client sees a broken stream."""
    handler.close_connection = True
    try:
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Upstream:
    """A raw socket read through our own buffer, so idleness can be checked with select()."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def fill(self, handler: BaseHTTPRequestHandler | None, gone_check: float) -> bool:
        """Read more; False when the upstream closed or the client hung up."""
        while True:
            readable, _, _ = select.select([self.sock], [], [], gone_check)
            if readable:
                data = self.sock.recv(65536)
                self.buf += data
                return bool(data)
            if handler is not None and client_gone(handler):
                return False

    def line(self, handler: BaseHTTPRequestHandler | None, gone_check: float) -> bytes | None:
        while b"\r\n" not in self.buf:
            if not self.fill(handler, gone_check):
                return None
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def take(self, size: int, handler: BaseHTTPRequestHandler, gone_check: float) -> bytes:
        while len(self.buf) < size and self.fill(handler, gone_check):
            pass
        data, self.buf = self.buf[:size], self.buf[size:]
        return data


def relay(
    host: str, port: int, path: str, handler: BaseHTTPRequestHandler, gone_check: float
) -> tuple[int, str] | None:
    """GET ``path`` from ``host:port`` and stream its chunked body to ``handler`` as it comes.

    Returns ``(status, body)`` when the upstream answers an error (nothing sent yet); None once
    the stream has been relayed. A cut upstream cuts the client; a client that hangs up closes the
    upstream connection (checked every ``gone_check`` seconds while the upstream is idle).
    """
    sock = socket.create_connection((host, port))
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        upstream = _Upstream(sock)
        status_line = upstream.line(None, gone_check) or b"HTTP/1.1 502 -"
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while line := upstream.line(None, gone_check):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 200:
            length = int(headers.get("content-length", "0"))
            return status, upstream.take(length, handler, gone_check).decode()
        start_chunked(handler, headers.get("content-type", "text/plain"))
        if headers.get("transfer-encoding") != "chunked":
            # A body with a length, or one that ends when the upstream closes.
            left = int(headers.get("content-length", "-1"))
            while left != 0:
                if not upstream.buf and not upstream.fill(handler, gone_check):
                    break
                data = upstream.buf if left < 0 else upstream.buf[:left]
                upstream.buf = upstream.buf[len(data) :]
                left = left - len(data) if left > 0 else left
                if not chunk(handler, data):
                    return None
            end_chunked(handler)
            return None
        while True:
            size_line = upstream.line(handler, gone_check)
            if size_line is None:
                abort(handler)
                return None
            size = int(size_line.strip() or b"0", 16)
            if size == 0:
                end_chunked(handler)
                return None
            data = upstream.take(size + 2, handler, gone_check)[:size]
            if len(data) < size:
                chunk(handler, data)
                abort(handler)
                return None
            if not chunk(handler, data):
                return None
    finally:
        sock.close()


def verb_of(method: str, name: str | None, query: JSON) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
