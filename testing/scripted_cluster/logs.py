"""A scripted node's ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS on 127.0.0.1, as the
kubelet serves it: x509 client authentication against the run's CA (``VerifyClientCertIfGiven``;
no certificate is the anonymous user, refused: 401), then authorization by a
SubjectAccessReview to kube-apiserver (``pkg/kubelet/server/auth.go``: the path's subresource,
``proxy`` for ``/containerLogs``; refused: 403 with the kubelet's text), then
``server.go`` getContainerLogs and ``kubelet_pods.go`` validateContainerLogStatus over the CRI
files of :mod:`.crilog` (options as ``logs.go`` NewLogOptions)."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from testing.kube_api import Api
from testing.scripted_cluster import kubeletauth
from testing.scripted_cluster.crilog import read_logs
from testing.scripted_cluster.logserver import (
    KubeletHttps,
    LogRequestError,
    Tls,
    options_from_query,
)

JSON = dict[str, Any]
WAITING = {  # validateContainerLogStatus: the most common pending failures
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


class Cut(Exception):
    """The stream breaks here (a test's dropped connection)."""


@dataclass
class ContainerLogState:
    """One container instance's log file and whether the container still writes to it."""

    path: Path
    running: bool = True
    cuts: list[tuple[bytes, set[int]]] = field(default_factory=list)  # (line, streams to cut)


class NodeLogServer(KubeletHttps):
    """``find(ns, pod)`` gives the pod as the kubelet knows it (None: not on this node);
    ``log(uid, container, restart)`` its log state."""

    def __init__(
        self,
        node: str,
        api: Api,
        tls: Tls,
        find: Callable[[str, str], JSON | None],
        log: Callable[[str, str, int], ContainerLogState | None],
    ) -> None:
        self.node = node
        self.api = api
        self.find = find
        self.log = log
        self.refused: list[str] = []
        self._streams = 0
        self._next_stream = 0
        self._lock = threading.Lock()
        self.open: set[int] = set()
        super().__init__("127.0.0.1", 0, tls)

    def _error(self, handler: BaseHTTPRequestHandler, code: int, text: str) -> None:
        with self._lock:
            self.refused.append(text)
        body = text.encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        connection = handler.connection
        assert isinstance(connection, ssl.SSLSocket)
        try:
            user = kubeletauth.user_of(connection.getpeercert())
            kubeletauth.authorize(self.api, self.node, user, handler.command, url.path)
        except kubeletauth.Refused as err:
            self._error(handler, err.code, str(err))
            return
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        try:
            if len(parts) != 4 or parts[0] != "containerLogs":
                raise LogRequestError(404, "404 page not found")
            _, namespace, name, container = parts
            if not container:
                raise LogRequestError(400, '{"message": "Missing container name."}')
            query = dict(parse_qsl(url.query))
            options = options_from_query(query, time.time_ns())
            pod = self.find(namespace, name)
            if pod is None:
                raise LogRequestError(404, f'pod "{name}/{namespace}" does not exist\n')
            state = self._validate(pod, container, query.get("previous") == "true")
        except LogRequestError as err:
            self._error(handler, err.code, str(err))
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        with self._lock:
            self._next_stream += 1
            stream = self._next_stream
            self.open.add(stream)

        def write(data: bytes) -> None:
            for line, streams in state.cuts:
                if stream in streams and data.endswith(line):
                    streams.discard(stream)
                    half = data[: len(data) - len(line) // 2]
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(half), half))
                    handler.wfile.flush()
                    raise Cut()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        try:
            read_logs(state.path, options, write, lambda: state.running, lambda: self._stopping)
            handler.wfile.write(b"0\r\n\r\n")
        except Cut:
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(2)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        finally:
            with self._lock:
                self.open.discard(stream)

    def _validate(self, pod: JSON, container: str, previous: bool) -> ContainerLogState:
        """validateContainerLogStatus: which instance's log, or the kubelet's refusal."""
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        entries = (status.get("containerStatuses") or []) + (
            status.get("initContainerStatuses") or []
        )
        entry = next((s for s in entries if s["name"] == container), None)
        if entry is None:
            raise LogRequestError(400, f'container "{container}" in pod "{name}" is not available')
        state, last = entry.get("state") or {}, entry.get("lastState") or {}
        restart = int(entry.get("restartCount", 0))
        if previous:
            if "terminated" not in last:
                raise LogRequestError(
                    400, f'previous terminated container "{container}" in pod "{name}" not found'
                )
            restart -= 1
        elif "running" not in state and "terminated" not in state:
            if "terminated" not in last:
                reason = (state.get("waiting") or {}).get("reason", "")
                raise LogRequestError(
                    400,
                    f'container "{container}" in pod "{name}" is waiting to start: '
                    + WAITING.get(reason, reason),
                )
            restart -= 1
        found = self.log(pod["metadata"]["uid"], container, restart)
        if found is None:
            raise LogRequestError(400, f'container "{container}" in pod "{name}" is not available')
        return found
