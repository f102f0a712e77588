"""A real MLflow tracking server (the ``mlflow`` package from PyPI) on loopback, for the tests.

``mlflow server`` with a SQLite backend store in a directory of its own, on 127.0.0.1 and a
free port; :meth:`MlflowServer.client` is MLflow's own ``MlflowClient`` for reading back what
ci-runner logged. Starting takes 10-20 s (the store's migrations): tests share one server per
session and tell their runs apart by experiment name.

:class:`BearerGate` puts it behind a proxy that checks bearer tokens: ``mlflow server`` checks
none itself, a deployment that takes ``MLFLOW_TRACKING_TOKEN`` has them checked in front of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from testing.ports import free_port

START_TIMEOUT = 120.0  # seconds: migrations on a busy 2-core machine


class MlflowServer:
    """``mlflow server`` in ``directory``; start with ``with`` (or start()/stop())."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "server.log").open("wb")
        argv = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{self.directory / 'mlflow.db'}",
            "--default-artifact-root", (self.directory / "artifacts").as_uri(),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", "1",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        self._proc = subprocess.Popen(
            argv, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log_tail()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server did not start in {START_TIMEOUT:g} s: {self.log_tail()}")

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        path = self.directory / "server.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def client(self) -> Any:
        """MLflow's own client for this server (imported here: it takes a few seconds)."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.url)


@dataclass(frozen=True)
class GateRequest:
    method: str
    path: str  # without the query
    token: str | None  # the bearer token it came with
    status: int


class BearerGate:
    """A proxy to ``upstream`` that lets through only requests with ``Authorization: Bearer
    <one of tokens>`` (else 401 and MLflow's ``UNAUTHENTICATED`` error, which MLflow's client
    raises as it would from any server), recording each request with its token."""

    def __init__(self, upstream: str, tokens: Collection[str]) -> None:
        self.upstream = upstream
        self.tokens = frozenset(tokens)
        self.requests: list[GateRequest] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                auth = self.headers.get("Authorization", "")
                token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
                if token not in gate.tokens:
                    status, data, kind = (
                        401,
                        b'{"error_code": "UNAUTHENTICATED"}',
                        "application/json",
                    )
                else:
                    headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                    answer = requests.request(
                        self.command, gate.upstream + self.path, data=body, headers=headers,
                        timeout=30,
                    )  # fmt: skip
                    status, data = answer.status_code, answer.content
                    kind = answer.headers.get("Content-Type", "application/json")
                gate.requests.append(
                    GateRequest(self.command, self.path.split("?")[0], token, status)
                )
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def tokens_by_path(self) -> dict[str, set[str | None]]:
        """Each path asked for, below ``/api/2.0/mlflow/``, with the tokens it came with."""
        found: dict[str, set[str | None]] = {}
        for request in self.requests:
            found.setdefault(request.path.split("/mlflow/", 1)[-1], set()).add(request.token)
        return found

    def __enter__(self) -> BearerGate:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
