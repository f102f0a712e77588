"""The fake API server's HTTP plumbing: chunked streams, and the ways a stream ends (cleanly,
cut half-way, or because the client hung up). Its JSON answers: ``testing/kube_faults.py``."""

from __future__ import annotations

import select
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
