"""The fake GitLab on loopback: its HTTP server, injected faults and the requests it recorded.

Faults are injected per method and path (429 with ``Retry-After``, bursts of 500, ...), either
before the request reaches GitLab (a proxy or Rack::Attack answering) or *after* GitLab executed it
(``after=True``: the write happened, the proxy then answered 502/504 or dropped the connection).
Every request is recorded so tests can count them.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from testing.fake_gitlab.mlflow import FakeMlflow
from testing.fake_gitlab.model import RecordedRequest
from testing.fake_gitlab.responses import Reply, Response, json_response, status_line
from testing.fake_gitlab.routes import route
from testing.fake_gitlab.state import GitLabState

DROP = 0  # a fault "status" that closes the connection without an answer


@dataclass
class _Fault:
    method: str | None
    path: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: bytes
    remaining: int
    after: bool


class FakeGitLab(GitLabState):
    """The fake server and its state; start it with ``with`` (or ``start()``/``stop()``).

    ``external_url`` is GitLab's configured ``external_url``: the base of every URL it answers
    with (``web_url``, pagination ``Link``); by default the address it listens on.
    """

    def __init__(self, *, external_url: str | None = None, port: int = 0) -> None:
        super().__init__()
        self._faults: list[_Fault] = []
        self._port = port
        self.external_url = external_url.rstrip("/") if external_url else None
        self.requests: list[RecordedRequest] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.mlflow = FakeMlflow(self.job_exists, lambda: self.external_url or self.url)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeGitLab:
        server = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._http = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name="fake-gitlab",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._http = None
        self._thread = None

    def __enter__(self) -> FakeGitLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The server URL to give python-gitlab (``http://127.0.0.1:<port>``)."""
        if self._http is None:
            raise RuntimeError("FakeGitLab is not started")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- faults and the record -------------------------------------------------------------

    def inject(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str = ".*",
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path`` (a regex searched
        in the wire path) with ``status``: before authentication, as a proxy or Rack::Attack
        would, or with ``after=True`` once GitLab has executed the request (a proxy timing out
        on a slow write). ``status`` :data:`DROP` closes the connection without an answer.
        Default bodies are GitLab's: ``Retry later`` for 429, JSON messages otherwise."""
        if body is None:
            if status == 429:
                body = b"Retry later\n"
            else:
                body = json.dumps({"message": status_line(status)}).encode()
        with self._lock:
            self._faults.append(
                _Fault(method, re.compile(path), status, dict(headers or {}), body, times, after)
            )

    def count(self, method: str, path: str = ".*") -> int:
        """How many recorded requests had ``method`` and a wire path matching regex ``path``."""
        return len(self.matching(method, path))

    def matching(self, method: str, path: str = ".*") -> list[RecordedRequest]:
        pattern = re.compile(path)
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    # --- request handling ------------------------------------------------------------------

    def handle(
        self, method: str, raw_target: str, headers: Mapping[str, str], body: bytes, host: str
    ) -> Response:
        split = urlsplit(raw_target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        base = self.external_url or f"http://{host}"
        with self._lock:
            response = self._fault(method, split.path, after=False)
            if response is None:
                try:
                    response = route(self, method, split.path, query, headers, body, base)
                except Reply as reply:
                    response = json_response(reply.status, reply.payload, reply.headers)
                response = self._fault(method, split.path, after=True) or response
            self.requests.append(
                RecordedRequest(method, split.path, query, dict(headers), body, response.status)
            )
        return response

    def _fault(self, method: str, path: str, *, after: bool) -> Response | None:
        for fault in self._faults:
            if fault.remaining <= 0 or fault.after != after:
                continue
            if (fault.method and fault.method != method) or not fault.path.search(path):
                continue
            fault.remaining -= 1
            content_type = "text/plain" if fault.status == 429 else "application/json"
            return Response(fault.status, fault.body, content_type, dict(fault.headers))
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like GitLab behind a proxy
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake: FakeGitLab = self.server.fake  # type: ignore[attr-defined]
        host = self.headers.get("Host") or fake.url.removeprefix("http://")
        response = fake.handle(self.command, self.path, headers, body, host)
        if response.status == DROP:
            self.close_connection = True
            return
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``FakeGitLab.requests`` instead."""
