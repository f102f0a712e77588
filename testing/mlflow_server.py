"""A real MLflow tracking server (the ``mlflow`` package from PyPI) on loopback, for the tests.

``mlflow server`` with a SQLite backend store in a directory of its own, on 127.0.0.1 and a
free port; :meth:`MlflowServer.client` is MLflow's own ``MlflowClient`` for reading back what
ci-runner logged. Starting takes 10-20 s (the store's migrations): tests share one server per
session and tell their runs apart by experiment name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

START_TIMEOUT = 120.0  # seconds: migrations on a busy 2-core machine


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
