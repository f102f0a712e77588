"""A scripted node's kubelet HTTPS server (``pkg/kubelet/server/server.go``): the TLS it serves
with and the query options of ``/containerLogs`` (``getContainerLogs``); what it serves is
:mod:`.logs`'."""

from __future__ import annotations

import contextlib
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from testing.scripted_cluster.crilog import LogOptions, parse_nano


class LogRequestError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def options_from_query(query: dict[str, str], now_ns: int) -> LogOptions:
    """logs.go NewLogOptions: the later of sinceSeconds and sinceTime wins."""
    options = LogOptions(
        follow=_true(query.get("follow")), timestamps=_true(query.get("timestamps"))
    )
    try:
        if "tailLines" in query:
            options.tail = int(query["tailLines"])
        if "limitBytes" in query:
            options.limit_bytes = int(query["limitBytes"])
        if "sinceSeconds" in query:
            options.since = now_ns - int(query["sinceSeconds"]) * 1_000_000_000
        if "sinceTime" in query:
            options.since = max(options.since, parse_nano(query["sinceTime"]))
    except ValueError as err:
        raise LogRequestError(400, f"invalid log options: {err}") from err
    if options.tail < -1 or (options.limit_bytes != -1 and options.limit_bytes < 1):
        raise LogRequestError(422, "tailLines and limitBytes must be positive")
    return options


@dataclass(frozen=True)
class Tls:
    """The kubelet's serving certificate and the CA its clients' certificates must chain to
    (kube-apiserver's ``--kubelet-client-certificate``): the kubelet's x509 authentication. A
    client without a certificate gets through the handshake and is answered 401, as the kubelet
    does (its TLS asks for a certificate and verifies one if given)."""

    cert: Path
    key: Path
    client_ca: Path

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        context.load_verify_locations(self.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


class KubeletHttps:
    """A kubelet's HTTPS server at ``address``:``port`` (0: any free port, then ``self.port``)
    with :class:`Tls`; each GET goes to :meth:`serve` on a thread of its own."""

    def __init__(self, address: str, port: int, tls: Tls) -> None:
        self._httpd = ThreadingHTTPServer((address, port), self._handler())
        # The handshake on the handler's thread (first read), not in accept on the serving one.
        self._httpd.socket = tls.context().wrap_socket(
            self._httpd.socket, server_side=True, do_handshake_on_connect=False
        )
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._stopping = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._httpd.shutdown()
        self._httpd.server_close()

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle(self) -> None:
                # A client without our CA's certificate, or one gone mid-stream.
                with contextlib.suppress(ssl.SSLError, ConnectionResetError, BrokenPipeError):
                    super().handle()

            def do_GET(self) -> None:
                server.serve(self)

        return Handler
