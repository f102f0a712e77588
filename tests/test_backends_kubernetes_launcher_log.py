"""LauncherLogStream: the launcher's log into the LogSink, once, whatever the connection does.

The pure parts here; the streams on the scripted cluster (marker ``control_plane``): the real
kube-apiserver proxying ``pods/log`` to the scripted kubelet, which breaks streams mid-line when
told (kube-apiserver then ends its answer cleanly, as it does when a kubelet's stream breaks).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Forbidden
from ci_runner.backends.kubernetes.launcher_log import (
    CleanEnd,
    LauncherLogStream,
    _epoch_seconds,
    after_clean_end,
    parse_timestamp,
    since_time,
)
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import Clock, ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY
from testing.backend_harness import Cluster
from testing.mpijob_manifests import mpijob_manifest
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario

on_the_control_plane = pytest.mark.control_plane


def launcher(cluster: Cluster) -> JobScenario:
    """An MPIJob (submitted by the test, not the backend) whose launcher pod exists."""
    cluster.admin.create(MPIJOBS.format(ns=cluster.namespace), mpijob_manifest("train-1"))
    job = cluster.job("train-1")
    job.launcher_created()
    return job


def follower(
    cluster: Cluster, job: JobScenario, tmp_path: Path, clock: Clock | None = None
) -> tuple[LauncherLogStream, list[str]]:
    echoed: list[str] = []
    api = KubeApi(cluster.api_client(), cluster.namespace, clock or ManualClock(), KUBERNETES_RETRY)
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    return LauncherLogStream(api, job.launcher_pod, sink), echoed


def following(cluster: Cluster, requests: int) -> None:
    """Until the follower's ``requests``-th log request is being streamed."""
    cluster.api.wait_until(
        lambda: (
            cluster.api.count("get", "pods/log") == requests
            and cluster.api.open_streams("get", "pods/log") == 1
        )
    )


def in_background(log: LauncherLogStream) -> threading.Thread:
    thread = threading.Thread(target=log.run, daemon=True)
    thread.start()
    return thread


def ended(thread: threading.Thread) -> None:
    thread.join(timeout=30)
    assert not thread.is_alive(), "the follower did not end"


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


def test_a_clean_end_is_the_end_only_once_the_container_is_known_to_have_ended() -> None:
    # kube-apiserver ends pods/log cleanly when the kubelet's stream breaks.
    assert after_clean_end(b"", ended=False, opened_after_end=False) is CleanEnd.RECONNECT
    assert after_clean_end(b"[0]<std", ended=False, opened_after_end=False) is CleanEnd.RECONNECT
    assert after_clean_end(b"", ended=True, opened_after_end=False) is CleanEnd.COMPLETE
    # It ended meanwhile: half a record may be a break, not its last words; ask once more.
    assert after_clean_end(b"[0]<std", ended=True, opened_after_end=False) is CleanEnd.CONFIRM
    assert after_clean_end(b"last words", ended=True, opened_after_end=True) is CleanEnd.COMPLETE
    assert after_clean_end(b"", ended=True, opened_after_end=True) is CleanEnd.COMPLETE


def test_a_chunks_lines_reach_the_sink_at_once_and_a_second_is_parsed_once(
    tmp_path: Path,
) -> None:
    echoed: list[str] = []
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    api = KubeApi(ApiClient(), "ml", ManualClock(), KUBERNETES_RETRY)
    log = LauncherLogStream(api, "train-1-launcher", sink)
    _epoch_seconds.cache_clear()

    log._pass_on(
        [
            b"2026-01-01T00:00:01.1Z [1,0]<stdout>:step 1",
            b"2026-01-01T00:00:01.2Z [1,1]<stdout>:step 1",
            b"2026-01-01T00:00:01.3Z [1,2]<stdout>:step 1",
            b"2026-01-01T00:00:02Z [1,0]<stdout>:step 2",
        ]
    )

    assert echoed == [
        "[1,0]<stdout>:step 1\n[1,1]<stdout>:step 1\n[1,2]<stdout>:step 1\n[1,0]<stdout>:step 2\n"
    ]
    info = _epoch_seconds.cache_info()
    assert (info.misses, info.hits) == (2, 2)  # strptime once per second of log


@on_the_control_plane
def test_follows_to_the_end_of_the_container(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: on real nodes every e2e follows its launcher to the end (e.g.
    test_the_example_trains_on_two_workers_over_ssh_between_pods); here a chunk's lines in one feed
    and no reconnect."""
    job = launcher(cluster)
    job.workers_running()
    job.launcher_running()
    job.launcher_log("one", "two")
    job.launcher_exits(0)
    log, echoed = follower(cluster, job, tmp_path)
    log.run()
    assert "".join(echoed) == "one\ntwo\n"  # a chunk's lines in one feed
    assert log.reconnects == 0


@on_the_control_plane
def test_every_drop_resumes_exactly_where_it_was(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: the kubelet's stream breaks mid-line three times, at chosen lines with equal
    stamps, which a real kubelet does not do on cue."""
    job = launcher(cluster)
    job.launcher_running()
    log, echoed = follower(cluster, job, tmp_path)
    thread = in_background(log)
    following(cluster, 1)
    job.launcher_log("a")
    job.launcher_log_cut("b", same_time=True)
    following(cluster, 2)
    job.launcher_log("c", "d", same_time=True)
    job.launcher_log_cut("e", same_time=True)
    following(cluster, 3)
    job.launcher_log_cut("f")
    following(cluster, 4)
    job.launcher_log("g")
    job.launcher_exits(0)
    ended(thread)
    assert "".join(echoed) == "".join(f"{c}\n" for c in "abcdefg")
    assert log.reconnects == 3


@on_the_control_plane
def test_a_last_line_without_newline_is_kept(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: on real nodes as test_a_last_line_without_a_newline_reaches_the_ci_log_whole;
    here the one more log request that told last words from a break, counted by FaultProxy."""
    job = launcher(cluster)
    job.launcher_running()
    job.launcher_log("one")
    job.launcher_log_unterminated("last words")
    job.launcher_exits(1)
    log, echoed = follower(cluster, job, tmp_path)
    log.run()
    log.sink.close()
    assert "".join(echoed) == "one\nlast words\n"
    # The container had ended when the stream ended mid-record: one more request said it was
    # its last words, not a break.
    assert cluster.api.count("get", "pods/log") == 2


@on_the_control_plane
def test_a_line_cut_as_the_container_ends_is_read_whole(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: the stream breaks mid-line and the container ends between the break and the
    follower's look, a moment a real node cannot be made to hit."""
    job = launcher(cluster)
    job.launcher_running()
    log, echoed = follower(cluster, job, tmp_path)
    ends_meanwhile = threading.Event()

    def container_ended() -> bool:
        # The launcher wrote on and ended between the break and the follower's look.
        job.launcher_log("[0]<stdout>:step 3")
        job.launcher_exits(0)
        ends_meanwhile.set()
        return True

    log._container_ended = container_ended  # type: ignore[method-assign]
    thread = in_background(log)
    following(cluster, 1)
    job.launcher_log("[0]<stdout>:step 1")
    job.launcher_log_cut("[0]<stdout>:step 2")
    ended(thread)
    assert ends_meanwhile.is_set()
    assert "".join(echoed) == "[0]<stdout>:step 1\n[0]<stdout>:step 2\n[0]<stdout>:step 3\n"


@on_the_control_plane
def test_a_deleted_pod_ends_the_log(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: on real nodes as test_a_deleted_pod_ends_the_log_being_followed; here the
    pod deleted while the follower's first request streams (seen through FaultProxy)."""
    job = launcher(cluster)
    job.launcher_running()
    job.launcher_log("one")
    log, echoed = follower(cluster, job, tmp_path)
    thread = in_background(log)
    following(cluster, 1)
    cluster.admin.delete(f"/api/v1/namespaces/{cluster.namespace}/pods/{job.launcher_pod}")
    ended(thread)
    log.sink.flush()
    assert echoed == ["one\n"]


@on_the_control_plane
def test_a_refused_log_is_an_error(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: what is tested is RBAC refusing pods/log at kube-apiserver; the node only stands
    in."""
    job = launcher(cluster)
    job.launcher_running()
    cluster.forbid("get", "pods/log")
    log, _ = follower(cluster, job, tmp_path)
    with pytest.raises(Forbidden):
        log.run()


@on_the_control_plane
def test_a_container_not_started_yet_is_waited_for(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: on real nodes as test_a_container_not_started_yet_is_waited_for (where the
    kubelet first answers 404, not knowing the pod yet, then 400); here the launcher starts during
    the follower's one sleep on the ManualClock."""
    job = launcher(cluster)

    class StartingWhileAway(ManualClock):
        """The first request got 400 "waiting to start"; then the launcher starts and ends."""

        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if len(self.sleeps) == 1:
                job.launcher_running()
                job.launcher_log("hello")
                job.launcher_exits(0)

    log, echoed = follower(cluster, job, tmp_path, StartingWhileAway())
    log.run()
    assert echoed == ["hello\n"]
    assert log.reconnects >= 1
    refused = [text for node in cluster.kubelet.nodes.values() for text in node.logs.refused]
    assert (
        f'container "launcher" in pod "{job.launcher_pod}" is waiting to start: ContainerCreating'
        in refused
    )


@on_the_control_plane
def test_a_rotation_during_a_drop_is_said_once(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: the log file is rotated while the stream is down; a real kubelet rotates by size on
    its own 10 s check, which cannot be timed."""
    job = launcher(cluster)
    job.launcher_running()

    class RotatingWhileAway(ManualClock):
        """The kubelet rotates the file (and "c" is written) while the stream is down."""

        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if len(self.sleeps) == 1:
                job.rotate_launcher_log()
                job.launcher_log("c")
                job.launcher_exits(0)

    log, echoed = follower(cluster, job, tmp_path, RotatingWhileAway())
    warnings: list[str] = []
    log.warn = warnings.append
    thread = in_background(log)
    following(cluster, 1)
    job.launcher_log("a")
    job.launcher_log_cut("b")
    ended(thread)
    assert "".join(echoed) == "a\nc\n"
    assert warnings == [
        "the launcher's log file was rotated while its stream was down: "
        "lines written meanwhile may be missing here"
    ]


@on_the_control_plane
def test_a_line_stamped_before_the_one_it_follows_survives_a_drop(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Scripted: a stderr line stamped before the stdout line it follows, then a cut; containerd
    stamps each stream as it reads it, and a real kubelet does not break a stream on cue."""
    job = launcher(cluster)
    job.launcher_running()
    log, echoed = follower(cluster, job, tmp_path)
    thread = in_background(log)
    following(cluster, 1)
    job.launcher_log("out 1", at=10_000_000_000)
    job.launcher_log("err 1", stream="stderr", at=9_500_000_000)
    job.launcher_log_cut("out 2", same_time=True)
    following(cluster, 2)
    job.launcher_log("out 3")
    job.launcher_exits(0)
    ended(thread)
    assert "".join(echoed) == "out 1\nerr 1\nout 2\nout 3\n"
    assert log.reconnects == 1
