"""Run the real Kubernetes backend against the fake API server and watch what it prints.

``with running_cluster(tmp_path) as cluster:`` gives a started :class:`FakeKubeServer` with the
fake MPI Operator, a :class:`CiLog` that records the CI log line by line, a ManualClock and
``cluster.backend(manifest)`` to build a :class:`KubernetesBackend` whose ``run()`` goes on a
thread (:meth:`Cluster.start`), so the test can play the cluster's part step by step, waiting
for each status line before the next step (real waits on a condition variable, bounded; the
backend's own waiting goes through the ManualClock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import kubernetes.client

from ci_runner.backends.kubernetes.backend import KubernetesBackend
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import RunResult
from ci_runner.clock import ManualClock
from ci_runner.console import Console
from ci_runner.http_policy import RetryPolicy
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.ci_log import CiLog
from testing.fake_kube.scenarios import JobScenario, MpiOperator
from testing.fake_kube.server import FakeKubeServer
from testing.mpijob_manifests import GIT_TOKEN, JOB, NAMESPACE, mpijob_manifest

JSON = dict[str, Any]
WATCHED = ("mpijobs.kubeflow.org", "pods", "events")
WAIT = 20.0  # real seconds a test waits for the backend before failing (never reached when green)


class Cluster:
    def __init__(
        self, server: FakeKubeServer, tmp_path: Path, zone: timedelta | None = None
    ) -> None:
        self.server = server
        self.operator = MpiOperator(server, zone=zone)
        self.tmp_path = tmp_path
        self.log = CiLog()
        self.clock = ManualClock()
        self.backend_under_test: KubernetesBackend | None = None
        self._thread: threading.Thread | None = None
        self._result: RunResult | None = None
        self._error: BaseException | None = None

    def job(self, name: str = JOB) -> JobScenario:
        return self.operator.job(name, NAMESPACE)

    def api_client(self) -> kubernetes.client.ApiClient:
        return kubernetes.client.ApiClient(self.server.configuration())

    def backend(
        self, manifest: JSON | None = None, unschedulable_timeout: float = 600
    ) -> KubernetesBackend:
        sink = LogSink(self.tmp_path / "train.log", self.log, SecretMasker([GIT_TOKEN]))
        manifest = manifest or mpijob_manifest()
        name = secret_name(manifest["metadata"]["name"])
        self.backend_under_test = KubernetesBackend(
            api_client=self.api_client(),
            namespace=NAMESPACE,
            manifest=manifest,
            secret=JobSecret(name, ("git-token",), {"git-token": GIT_TOKEN}),
            sink=sink,
            console=Console(self.log, self.log),
            clock=self.clock,
            unschedulable_timeout=unschedulable_timeout,
            retry=RetryPolicy(attempts=6, base_delay=1.0, max_delay=30.0),
        )
        return self.backend_under_test

    def start(self, manifest: JSON | None = None, unschedulable_timeout: float = 600) -> None:
        """``backend(...).run()`` on a thread."""
        backend = self.backend(manifest, unschedulable_timeout)

        def run() -> None:
            try:
                self._result = backend.run()
            except BaseException as exc:
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def wait_watching(self) -> None:
        """Wait until the backend watches its MPIJob, pods and Events."""
        self.server.wait_for_watches(*WATCHED)

    def watched(self) -> list[str]:
        """The backend's resources with a watch open now (the fake sees a client hang up)."""
        with self.server.store.cond:
            return [key for key in WATCHED if self.server.open_watches.get(key, 0) > 0]

    def wait_watching_pods_alone(self) -> None:
        """Wait until the backend watches only the pods (the job runs steadily)."""
        self.server.wait_until(lambda: self.watched() == ["pods"])

    def started(
        self, manifest: JSON | None = None, unschedulable_timeout: float = 600
    ) -> JobScenario:
        """Start the backend, wait until it watches; the job's scenario."""
        self.start(manifest, unschedulable_timeout)
        self.wait_watching()
        return self.job(str((manifest or mpijob_manifest())["metadata"]["name"]))

    def result(self, timeout: float = WAIT) -> RunResult:
        """Wait for ``run()`` to return; its RunResult (or its exception, raised)."""
        assert self._thread is not None
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            raise AssertionError(f"run() did not return; the CI log so far: {self.log.lines}")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def error(self) -> BaseException:
        """Wait for ``run()`` to raise; the exception."""
        assert self._thread is not None
        self._thread.join(timeout=WAIT)
        assert self._error is not None, f"run() did not raise: {self._result}"
        return self._error


@contextmanager
def running_cluster(tmp_path: Path, zone: timedelta | None = None) -> Iterator[Cluster]:
    with FakeKubeServer() as server:
        cluster = Cluster(server, tmp_path, zone)
        try:
            yield cluster
        finally:
            backend = cluster.backend_under_test
            if cluster._thread is not None and cluster._thread.is_alive() and backend:
                backend.cancel()
                cluster._thread.join(timeout=WAIT)
