"""The kubelet's ``/containerLogs/<ns>/<pod>/<container>`` endpoint (``pkg/kubelet/server/
server.go`` getContainerLogs, ``kubelet_pods.go`` GetKubeletContainerLogs and
validateContainerLogStatus), served from the CRI log files of :mod:`.crilog` to clients that
:mod:`.kubeletauth` lets in."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

from testing.emulated_cluster import kubeletauth
from testing.emulated_cluster.crilog import LogOptions, parse_nano, read_logs

if TYPE_CHECKING:
    from testing.emulated_cluster.podworker import PodWorker


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


Authorize = Callable[[kubeletauth.User, str, str], None]  # user, method, path; raises Refused


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


class LogServer(KubeletHttps):
    """An HTTPS server on the node's InternalIP; ``find(ns, pod)`` gives the pod's worker,
    ``authorize`` lets a request in or raises :class:`kubeletauth.Refused`."""

    def __init__(
        self,
        address: str,
        port: int,
        find: Callable[[str, str], PodWorker | None],
        tls: Tls,
        authorize: Authorize,
    ) -> None:
        self.find = find
        self.authorize = authorize
        super().__init__(address, port, tls)

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        query = dict(parse_qsl(url.query))
        try:
            connection = handler.connection
            assert isinstance(connection, ssl.SSLSocket)
            try:
                user = kubeletauth.user_of(connection.getpeercert())
                self.authorize(user, handler.command, url.path)
            except kubeletauth.Refused as err:
                raise LogRequestError(err.code, str(err)) from err
            if len(parts) != 4 or parts[0] != "containerLogs":
                raise LogRequestError(404, "404 page not found")
            _, namespace, pod, container = parts
            if not container:
                raise LogRequestError(400, '{"message": "Missing container name."}')
            options = options_from_query(query, time.time_ns())
            worker = self.find(namespace, pod)
            if worker is None:
                raise LogRequestError(404, f'pod "{pod}/{namespace}" does not exist\n')
            slot = next((s for s in worker.containers() if s.name == container), None)
            if slot is None:
                raise LogRequestError(404, f'container "{container}" not found in pod "{pod}"\n')
            previous = _true(query.get("previous"))
            number = slot.restart_count - 1 if previous else slot.restart_count
            if previous and "terminated" not in slot.last_state:
                raise LogRequestError(
                    400, f'previous terminated container "{container}" in pod "{pod}" not found'
                )
            if not previous and slot.process is None and "terminated" not in slot.state:
                reason = (slot.state.get("waiting") or {}).get("reason", "ContainerCreating")
                if "terminated" not in slot.last_state:
                    raise LogRequestError(
                        400,
                        f'container "{container}" in pod "{pod}" is waiting to start: {reason}',
                    )
                number = slot.restart_count - 1  # back-off: the last run's log
            path = worker.log_dir / container / f"{number}.log"
            if not path.exists():
                raise LogRequestError(400, f'failed to try resolving symlinks in path "{path}"')
        except LogRequestError as err:
            body = str(err).encode()
            handler.send_response(err.code)
            handler.send_header("Content-Type", "text/plain; charset=utf-8")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        process = slot.process if number == slot.restart_count else None
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def write(data: bytes) -> None:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        def running() -> bool:
            return process is not None and (process.running() or not process.log_closed())

        try:
            read_logs(path, options, write, running, lambda: self._stopping)
            handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
