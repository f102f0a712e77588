"""A reverse proxy in front of the scripted cluster's kube-apiserver: plain HTTP on 127.0.0.1,
TLS (the cluster's CA) to the API server. Each request's bearer token goes through
``credentials(token)``, which gives the token to forward or None (the proxy answers 401 itself).

Two uses: the GitLab agent server (KAS) of a CI job (:func:`kas_credentials`), and a counter of
every request a client makes, with open watches that can be cut (bench 4). Responses stream
through as they come (watches, ``pods/log?follow``), each on its own connection."""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
REPLACED = HOP_BY_HOP | {"authorization"}
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it: kube-apiserver's verb and resource (``pods/log``)."""

    method: str
    path: str
    verb: str
    resource: str


def verb_and_resource(method: str, path: str, query: dict[str, list[str]]) -> tuple[str, str]:
    """The request's verb and resource as kube-apiserver's RequestInfoFactory names them
    (staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go)."""
    parts = [p for p in path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = "/".join(rest[:1] + rest[2:3])
    named = len(rest) >= 2
    if method == "GET":
        if query.get("watch", [""])[0] in ("true", "1"):
            return "watch", resource
        return ("get" if named else "list"), resource
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method == "DELETE":
        return ("delete" if named else "deletecollection"), resource
    return verbs.get(method, method.lower()), resource


class ApiProxy:
    """``with ApiProxy(url, ca, credentials) as proxy:`` ``proxy.url`` answers as kube-apiserver
    at ``url`` does, for the tokens ``credentials`` maps."""

    def __init__(self, upstream: str, ca: Path, credentials: Callable[[str], str | None]) -> None:
        split = urlsplit(upstream)
        self._host = split.hostname or "127.0.0.1"
        self._port = split.port or 443
        self._tls = ssl.create_default_context(cafile=str(ca))
        self._credentials = credentials
        self.requests: list[Seen] = []
        self.refused = 0  # requests answered 401 (no token, or one ``credentials`` refused)
        self.open_watches: Counter[str] = Counter()
        self._streams: dict[int, tuple[str, http.client.HTTPSConnection]] = {}
        self.lock = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ApiProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ApiProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, verb: str | None = None) -> int:
        with self.lock:
            return sum(verb is None or seen.verb == verb for seen in self.requests)

    def watching(self) -> list[str]:
        """Resources with a watch open now."""
        with self.lock:
            return sorted(key for key, n in self.open_watches.items() if n > 0)

    def drop_watches(self, resource: str | None = None) -> None:
        """Cut the open watches (of ``resource`` only, if given): the client sees its watch end,
        as when kube-apiserver ends one at its timeoutSeconds."""
        with self.lock:
            chosen = [c for r, c in self._streams.values() if resource in (None, r)]
        for connection in chosen:
            with suppress(OSError):
                if connection.sock is not None:
                    connection.sock.shutdown(socket.SHUT_RDWR)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked bodies: clients read watch events as they come

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        return Handler

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        verb, resource = verb_and_resource(handler.command, split.path, parse_qs(split.query))
        with self.lock:
            self.requests.append(Seen(handler.command, split.path, verb, resource))
        given = handler.headers.get("Authorization", "")
        token = self._credentials(given.removeprefix("Bearer ")) if given else None
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if token is None:
            with self.lock:
                self.refused += 1
            self._answer(handler, 401, json.dumps(UNAUTHORIZED).encode())
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in REPLACED}
        headers["Authorization"] = f"Bearer {token}"
        upstream = http.client.HTTPSConnection(self._host, self._port, context=self._tls)
        key = id(upstream)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
            handler.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    handler.send_header(name, value)
            length = answer.getheader("Content-Length")
            if length is None:
                handler.send_header("Transfer-Encoding", "chunked")
            else:
                handler.send_header("Content-Length", length)
            handler.send_header("Connection", "close")
            handler.end_headers()
            ended = threading.Event()
            if verb == "watch":
                with self.lock:
                    self._streams[key] = (resource, upstream)
                    self.open_watches[resource] += 1
                    self.lock.notify_all()
                threading.Thread(
                    target=_end_on_hangup, args=(handler.connection, upstream, ended), daemon=True
                ).start()
            try:
                self._stream(answer, handler, chunked=length is None)
            finally:
                ended.set()
        except (OSError, http.client.HTTPException):
            pass  # a cut watch, or the client hung up: the connection ends here
        finally:
            with self.lock:
                if self._streams.pop(key, None) is not None:
                    self.open_watches[resource] -= 1
                    self.lock.notify_all()
            upstream.close()
            handler.close_connection = True

    @staticmethod
    def _stream(
        answer: http.client.HTTPResponse, handler: BaseHTTPRequestHandler, chunked: bool
    ) -> None:
        while True:
            try:
                data = answer.read1(65536)
            except (OSError, http.client.HTTPException):
                data = b""  # cut (drop_watches): the body ends cleanly, as at a watch's timeout
            if not data:
                break
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


def _end_on_hangup(
    client: socket.socket, upstream: http.client.HTTPSConnection, ended: threading.Event
) -> None:
    """Cut ``upstream`` once the client hangs up (a client that stops watching closes its
    connection; an idle watch would otherwise never notice, having nothing to write)."""
    while not ended.is_set():
        with suppress(OSError, ValueError):
            readable, _, _ = select.select([client], [], [], 0.2)
            if readable and client.recv(1, socket.MSG_PEEK) == b"":
                if upstream.sock is not None:
                    upstream.sock.shutdown(socket.SHUT_RDWR)
                return
        if client.fileno() < 0:
            return


def kas_credentials(
    agent_id: int, job_token: str, account_token: str
) -> Callable[[str], str | None]:
    """What the GitLab agent server does with a CI job's ``ci:<agent id>:<job token>``
    (gitlabhq app/services/ci/generate_kubeconfig_service.rb makes it): it asks GitLab which
    agents the job token may use (lib/api/internal/kubernetes.rb, ``GET
    /api/v4/job/allowed_agents``) and proxies to that agent, which calls kube-apiserver as its
    own ServiceAccount (ci_access without ``access_as``, i.e. ``access_as: agent``, the
    default: docs.gitlab.com/user/clusters/agent/ci_cd_workflow/). Here: only ``agent_id``
    with ``job_token`` is let through, with ``account_token`` (the agent's account)."""
    expected = f"ci:{agent_id}:{job_token}"
    return lambda token: account_token if token == expected else None


def passing(token: str) -> str | None:
    """Credentials that forward the client's own token (a counting proxy)."""
    return token
