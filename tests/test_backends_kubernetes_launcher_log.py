"""LauncherLogStream: the launcher's log into the LogSink, once, whatever the connection does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Forbidden
from ci_runner.backends.kubernetes.launcher_log import (
    LauncherLogStream,
    parse_timestamp,
    since_time,
)
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY
from testing.fake_kube.scenarios import JobScenario, MpiOperator
from testing.fake_kube.server import FakeKubeServer
from testing.mpijob_manifests import NAMESPACE, mpijob_manifest


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


def launcher(server: FakeKubeServer) -> JobScenario:
    job = MpiOperator(server).job("train-1", NAMESPACE)
    server.store.create("mpijobs.kubeflow.org", NAMESPACE, mpijob_manifest("train-1"))
    return job


def follower(
    server: FakeKubeServer, job: JobScenario, tmp_path: Path
) -> tuple[LauncherLogStream, list[str]]:
    echoed: list[str] = []
    api = KubeApi(
        kubernetes.client.ApiClient(server.configuration()),
        NAMESPACE,
        ManualClock(),
        KUBERNETES_RETRY,
    )
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    return LauncherLogStream(api, job.launcher_pod, sink), echoed


def test_parse_timestamp_reads_rfc3339_with_any_fraction() -> None:
    base = parse_timestamp("2026-01-01T00:00:01Z")
    assert base is not None
    assert parse_timestamp("2026-01-01T00:00:01.5Z") == base + 500_000_000
    assert parse_timestamp("2026-01-01T00:00:01.000000001Z") == base + 1
    assert parse_timestamp("2026-01-01T00:00:01.123456789Z") == base + 123_456_789
    assert parse_timestamp("not-a-time") is None
    assert parse_timestamp("2026-01-01T02:00:01+02:00") == base
    assert parse_timestamp("2025-12-31T23:30:01.5-00:30") == base + 500_000_000


def test_since_time_is_the_whole_second() -> None:
    nanos = parse_timestamp("2026-03-04T05:06:07.890Z")
    assert nanos is not None
    assert since_time(nanos) == "2026-03-04T05:06:07Z"


def test_follows_to_the_end_of_the_container(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.workers_running()
    job.launcher_running()
    job.launcher_log("one", "two")
    job.launcher_exits(0)
    log, echoed = follower(server, job, tmp_path)
    log.run()
    assert echoed == ["one\n", "two\n"]
    assert log.reconnects == 0


def test_every_drop_resumes_exactly_where_it_was(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.launcher_running()
    job.launcher_log("a")
    job.launcher_log_cut("b", same_time=True)
    job.launcher_log("c", "d", same_time=True)
    job.launcher_log_cut("e", same_time=True)
    job.launcher_log_cut("f")
    job.launcher_log("g")
    job.launcher_exits(0)
    log, echoed = follower(server, job, tmp_path)
    log.run()
    assert echoed == [f"{c}\n" for c in "abcdefg"]
    assert log.reconnects == 3


def test_a_last_line_without_newline_is_kept(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.launcher_running()
    job.launcher_log("one")
    job.launcher_log_unterminated("last words")
    job.launcher_exits(1)
    log, echoed = follower(server, job, tmp_path)
    log.run()
    log.sink.close()
    assert echoed == ["one\n", "last words\n"]


def test_a_deleted_pod_ends_the_log(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.launcher_running()
    job.launcher_log("one")
    log, echoed = follower(server, job, tmp_path)
    thread = threading.Thread(target=log.run, daemon=True)
    thread.start()
    server.wait_until(lambda: job.kubelet.open_streams == 1)
    server.store.delete("pods", NAMESPACE, job.launcher_pod)
    thread.join(timeout=20)
    assert not thread.is_alive()
    log.sink.flush()
    assert echoed == ["one\n"]


def test_a_refused_log_is_an_error(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.launcher_running()
    server.forbid("get", "pods/log")
    log, _ = follower(server, job, tmp_path)
    with pytest.raises(Forbidden):
        log.run()


def test_a_container_not_started_yet_is_waited_for(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    log, echoed = follower(server, job, tmp_path)

    # The first request gets 400 "waiting to start"; then the launcher starts and finishes.
    def start_later() -> None:
        server.wait_until(lambda: len(job.kubelet.refused) >= 1)
        job.launcher_running()
        job.launcher_log("hello")
        job.launcher_exits(0)

    thread = threading.Thread(target=start_later, daemon=True)
    thread.start()
    log.run()
    thread.join(timeout=20)
    assert echoed == ["hello\n"]
    assert log.reconnects >= 1


def test_a_rotation_during_a_drop_is_said_once(server: FakeKubeServer, tmp_path: Path) -> None:
    job = launcher(server)
    job.launcher_running()
    job.launcher_log("a")
    job.launcher_log_cut("b")

    class RotatingWhileAway(ManualClock):
        """The kubelet rotates the file (and "c" is written) while the stream is down."""

        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if len(self.sleeps) == 1:
                job.rotate_launcher_log()
                job.launcher_log("c")
                job.launcher_exits(0)

    client = kubernetes.client.ApiClient(server.configuration())
    api = KubeApi(client, NAMESPACE, RotatingWhileAway(), KUBERNETES_RETRY)
    echoed: list[str] = []
    warnings: list[str] = []
    log = LauncherLogStream(api, job.launcher_pod, LogSink(tmp_path / "log.txt", echoed.append))
    log.warn = warnings.append
    log.run()
    assert echoed == ["a\n", "c\n"]
    assert warnings == [
        "the launcher's log file was rotated while its stream was down: "
        "lines written meanwhile may be missing here"
    ]


def test_a_line_stamped_before_the_one_it_follows_survives_a_drop(
    server: FakeKubeServer, tmp_path: Path
) -> None:
    job = launcher(server)
    job.launcher_running()
    job.launcher_log("out 1", at=10_000_000_000)
    job.launcher_log("err 1", stream="stderr", at=9_500_000_000)
    job.launcher_log_cut("out 2", same_time=True)
    job.launcher_log("out 3")
    job.launcher_exits(0)
    log, echoed = follower(server, job, tmp_path)
    log.run()
    assert echoed == ["out 1\n", "err 1\n", "out 2\n", "out 3\n"]
    assert log.reconnects == 1
