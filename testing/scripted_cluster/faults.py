"""Faults at the API: a reverse proxy on 127.0.0.1 (plain HTTP) in front of the scripted
cluster's kube-apiserver (HTTPS, checked against the run's CA). The backend's client talks to
it; every request goes on to kube-apiserver with the token ``credentials(token)`` gives for the
client's (its own by default; None: the proxy answers 401 as kube-apiserver words it, e.g. the
GitLab agent server of :mod:`testing.scripted_cluster.kas` refusing a token), and every answer
comes back as it was sent: a chunked answer (a watch, a followed log) chunk by chunk as it
arrives.

What a test can make happen (each on the next matching requests, or now):

- :meth:`FaultProxy.fail_next` (:class:`testing.kube_faults.FaultInjector`'s): answer with 500
  or 429 (with ``Retry-After``) or 410 as kube-apiserver words them (``Status`` bodies), without
  forwarding; or :data:`~testing.kube_faults.CUT`: forward, then break kube-apiserver's answer
  off half-way through its body.
- :meth:`FaultProxy.drop_watches`: break every open watch (of a resource) half-way through an
  event (as a connection lost between a client and the server does).
- :meth:`FaultProxy.end_watches`: end every open watch (of a resource) cleanly, as kube-apiserver
  ends one at its ``timeoutSeconds``.
- :meth:`FaultProxy.expire_watches`: the next watches get what kube-apiserver sends a watch
  whose resourceVersion is too old: 200, one ERROR event with a 410 ``Expired`` Status, the end
  (``staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go``: "too old resource
  version").

What a test can see: :attr:`FaultProxy.requests` (verb and resource as RBAC names them),
:attr:`~FaultProxy.refused` (answered 401 here), :attr:`~FaultProxy.watch_events` (events sent
to the client's watches, one JSON object a line each),
:meth:`~FaultProxy.count`, :meth:`~FaultProxy.open_watches` (a client hanging up closes its
watch here and at kube-apiserver at once), :meth:`~FaultProxy.verbs_used`, and
:meth:`~FaultProxy.wait_until` (woken by every request and every watch opened or closed)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from testing.kube_faults import (
    CUT,
    Fault,
    FaultInjector,
    Request,
    request_of,
    send_json,
    status,
)
from testing.waiting import WAIT

# Not forwarded either way (RFC 9110 7.6.1), or set by us for the body we send.
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer"}
_REPLACED = _HOP | {"authorization"}
_HALF_EVENT = b'{"type":"MODIFIED","object":{"kind":"'


def passing(token: str) -> str | None:
    """The default credentials: the client's own token (or none: ``""``) goes on."""
    return token


class _Stream:
    """One chunked answer being passed on: writes and a drop from another thread serialised."""

    def __init__(self, handler: BaseHTTPRequestHandler, upstream: socket.socket | None) -> None:
        self.handler = handler
        self.upstream = upstream
        self.lock = threading.Lock()
        self.ended = False

    def send(self, data: bytes) -> bool:
        with self.lock:
            if self.ended:
                return False
            try:
                self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.handler.wfile.flush()
            except OSError:
                self._end()
                return False
            return True

    def finish(self) -> None:
        """End the answer cleanly (its last chunk), and the one from upstream with it."""
        with self.lock:
            if not self.ended:
                self.ended = True
                with contextlib.suppress(OSError):
                    self.handler.wfile.write(b"0\r\n\r\n")
                    self.handler.wfile.flush()
                if self.upstream is not None:
                    with contextlib.suppress(OSError):
                        self.upstream.shutdown(socket.SHUT_RDWR)

    def drop(self, last_words: bytes = b"") -> None:
        """Break the answer (after ``last_words``, an unterminated chunk of them)."""
        with self.lock:
            if self.ended:
                return
            if last_words:
                with contextlib.suppress(OSError):
                    self.handler.wfile.write(b"%x\r\n%s" % (len(last_words) * 2, last_words))
                    self.handler.wfile.flush()
            self._end()

    def _end(self) -> None:
        self.ended = True
        self.handler.close_connection = True
        for sock in (self.handler.connection, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class FaultProxy(FaultInjector):
    """``with FaultProxy(url, ca) as proxy:`` the proxy to kube-apiserver at ``url``; clients
    use ``proxy.url``. ``credentials`` maps a client's bearer token to the one forwarded (None:
    401); by default the client's own goes on. :data:`~testing.kube_faults.CUT` forwards the
    request, then breaks kube-apiserver's answer off half-way through its body."""

    def __init__(
        self, upstream: str, ca: Path, credentials: Callable[[str], str | None] = passing
    ) -> None:
        parts = urlsplit(upstream)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 443
        self._tls = ssl.create_default_context(cafile=str(ca))
        self._credentials = credentials
        super().__init__(threading.Condition())
        self.wait_seconds = WAIT
        self.refused = 0  # requests answered 401 (no token, or one ``credentials`` refused)
        self.watch_events = 0  # watch events passed on (each ends with a newline)
        self._expire: list[Fault] = []
        self._streams: dict[_Stream, Request] = {}  # open chunked answers
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults (and FaultInjector.fail_next) ------------------------------------------------

    def expire_watches(self, times: int = 1, resource: str | None = None) -> None:
        """The next ``times`` watches (of ``resource``) are told their resourceVersion is too
        old: an ERROR event with a 410 Expired Status, then the end of the answer."""
        self.add_fault(self._expire, Fault(410, times, None, "watch", resource))

    def drop_watches(self, resource: str | None = None) -> None:
        """Break every open watch (of ``resource``) half-way through an event."""
        for stream in self._take_watches(resource):
            stream.drop(_HALF_EVENT)

    def end_watches(self, resource: str | None = None) -> None:
        """End every open watch (of ``resource``) cleanly, as kube-apiserver does at the
        watch's ``timeoutSeconds``."""
        for stream in self._take_watches(resource):
            stream.finish()

    def _take_watches(self, resource: str | None) -> list[_Stream]:
        with self.cond:
            streams = [
                s
                for s, r in self._streams.items()
                if r.verb == "watch" and resource in (None, r.resource)
            ]
            for stream in streams:  # gone now, not once their threads notice
                del self._streams[stream]
            self.cond.notify_all()
        return streams

    # -- what was asked ----------------------------------------------------------------------

    def open_streams(self, verb: str, resource: str) -> int:
        """How many ``verb`` answers on ``resource`` are being streamed now (``"watch",
        "pods"``, ``"get", "pods/log"``)."""
        with self.cond:
            return sum(
                1 for r in self._streams.values() if (r.verb, r.resource) == (verb, resource)
            )

    def watching(self) -> set[str]:
        """The resources with a watch open now."""
        with self.cond:
            return {r.resource for r in self._streams.values() if r.verb == "watch"}

    def state(self) -> str:
        """For :meth:`wait_until` (woken at every request and watch opened or ended, and
        waiting :data:`WAIT` seconds unless told)."""
        return f"requests: {self.counts()}, watching: {sorted(self.watching())}"

    # -- HTTP --------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(ConnectionError, OSError):
                    super().handle()

            def do_GET(self) -> None:
                proxy._serve(self)

            do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        request = request_of(handler.command, handler.path)
        if request is not None:
            self.record(request)
        token = self._credentials(handler.headers.get("Authorization", "").removeprefix("Bearer "))
        if token is None:
            with self.cond:
                self.refused += 1
            # apierrors.NewUnauthorized("Unauthorized"), as kube-apiserver's authentication
            # filter answers (staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go)
            send_json(handler, 401, status(401, "Unauthorized"))
            return
        fault = self.take_fault(request)
        if fault is not None and fault.code != CUT:
            fault.send(handler)
            return
        assert request is not None or fault is None
        if request is not None and request.verb == "watch":
            expired = self.take_fault(request, self._expire)
            if expired is not None:
                self._send_expired(handler, request)
                return
        self._forward(handler, body, token, request, cut=fault is not None)

    def _send_expired(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        version = request.param("resourceVersion") or "0"
        oldest = int(version) + 1 if version.isdigit() else 1
        event = {
            "type": "ERROR",
            "object": status(410, f"too old resource version: {version} ({oldest})", "Expired"),
        }
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        stream = _Stream(handler, None)
        stream.send(json.dumps(event).encode() + b"\n")
        stream.finish()

    def _forward(
        self,
        handler: BaseHTTPRequestHandler,
        body: bytes,
        token: str,
        request: Request | None,
        cut: bool,
    ) -> None:
        upstream = http.client.HTTPSConnection(
            self._host, self._port, context=self._tls, timeout=None
        )
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _REPLACED}
            headers["Content-Length"] = str(len(body))
            if token:
                headers["Authorization"] = f"Bearer {token}"
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
            handler.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP:
                    handler.send_header(key, value)
            if answer.getheader("Transfer-Encoding", "").lower() != "chunked":
                data = answer.read()
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                if cut:
                    handler.wfile.write(data[: len(data) // 2])
                    handler.wfile.flush()
                    _Stream(handler, upstream.sock)._end()
                    return
                handler.wfile.write(data)
                return
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            self._pass_chunks(handler, upstream, answer, request, cut)
        finally:
            upstream.close()

    def _pass_chunks(
        self,
        handler: BaseHTTPRequestHandler,
        upstream: http.client.HTTPSConnection,
        answer: http.client.HTTPResponse,
        request: Request | None,
        cut: bool,
    ) -> None:
        stream = _Stream(handler, upstream.sock)
        if request is not None:
            with self.cond:
                self._streams[stream] = request
                self.cond.notify_all()
        # The client sends nothing more on this connection: anything readable is its end.
        threading.Thread(target=self._until_client_leaves, args=(stream,), daemon=True).start()
        try:
            while True:
                try:
                    data = answer.read1(64 * 1024)
                except (OSError, http.client.HTTPException, ValueError):
                    stream.drop()
                    return
                if not data:
                    stream.finish()
                    return
                if cut:
                    stream.drop(data[: max(len(data) // 2, 1)])
                    return
                if not stream.send(data):
                    return
                if request is not None and request.verb == "watch":
                    with self.cond:
                        self.watch_events += data.count(b"\n")
        finally:
            with self.cond:
                self._streams.pop(stream, None)
                self.cond.notify_all()

    @staticmethod
    def _until_client_leaves(stream: _Stream) -> None:
        with contextlib.suppress(OSError):
            stream.handler.connection.recv(1, socket.MSG_PEEK)
        stream.drop()
