"""supervision: the job's watcher and log threads, one inbox, against the in-process API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Forbidden
from ci_runner.backends.kubernetes.resources import JOB_NAME_LABEL
from ci_runner.backends.kubernetes.supervision import JobThreads
from ci_runner.backends.kubernetes.watching import WatchUpdate
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY
from ci_runner.masking import SecretMasker
from testing.fake_kube.server import FakeKubeServer

JOB = "j"
MPIJOBS = "mpijobs.kubeflow.org"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


@pytest.fixture
def threads(server: FakeKubeServer, tmp_path: Path) -> Iterator[JobThreads]:
    client = kubernetes.client.ApiClient(server.configuration())
    api = KubeApi(client, "ml", ManualClock(), KUBERNETES_RETRY)
    sink = LogSink(tmp_path / "train.log", lambda _text: None, SecretMasker([]))
    threads = JobThreads(api, JOB, sink, "launcher", lambda _warning: None)
    yield threads
    threads.stop()
    sink.close()


def updates_until(threads: JobThreads, wanted: int) -> list[tuple[str, str, tuple[str, ...]]]:
    """The next ``wanted`` watch updates: (resource, type, names)."""
    seen: list[tuple[str, str, tuple[str, ...]]] = []
    for _ in range(40):
        update = threads.next_update()
        if isinstance(update, WatchUpdate):
            names = tuple(o["metadata"]["name"] for o in update.objects)
            seen.append((update.resource.plural, update.type, names))
        if len(seen) >= wanted:
            return seen
    raise AssertionError(f"only {seen}")


def event(name: str, kind: str, involved: str, uid: str = "") -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": kind, "name": involved, "uid": uid},
        "type": "Warning",
        "reason": "R",
    }


def test_the_jobs_objects_reach_the_inbox_and_other_events_do_not(
    server: FakeKubeServer, threads: JobThreads
) -> None:
    server.store.create("events", "ml", event("before", "Pod", "j-worker-0"))
    threads.start(job_uid="u1")
    first = updates_until(threads, 3)
    assert sorted(first) == [
        ("events", "SYNC", ("before",)),
        ("mpijobs", "SYNC", ()),
        ("pods", "SYNC", ()),
    ]
    server.wait_for_watches(MPIJOBS, "pods", "events")
    server.store.create("events", "ml", event("other", "Pod", "k-worker-0"))
    server.store.create("events", "ml", event("earlier", "MPIJob", JOB, uid="u0"))
    server.store.create("pods", "ml", {"metadata": {"name": "k-worker-0", "labels": {}}})
    server.store.create("events", "ml", event("ours", "MPIJob", JOB, uid="u1"))
    pod = {"metadata": {"name": "j-worker-0", "labels": {JOB_NAME_LABEL: JOB}}}
    server.store.create("pods", "ml", pod)
    # Each watch on its own thread: in either order.
    assert sorted(updates_until(threads, 2)) == [
        ("events", "ADDED", ("ours",)),
        ("pods", "ADDED", ("j-worker-0",)),
    ]


def test_paused_only_the_pods_are_watched_until_the_mpijob_is_again(
    server: FakeKubeServer, threads: JobThreads
) -> None:
    threads.start(job_uid="u1")
    server.wait_for_watches(MPIJOBS, "pods", "events")
    paused = [threads.mpijob_paused]
    threads.pause()
    paused.append(threads.mpijob_paused)
    server.wait_until(lambda: server.open_watches == {MPIJOBS: 0, "pods": 1, "events": 0})
    threads.watch_mpijob("1")
    paused.append(threads.mpijob_paused)
    assert paused == [False, True, False]
    server.wait_until(lambda: server.open_watches == {MPIJOBS: 1, "pods": 1, "events": 0})
    assert server.count("list", "mpijobs") == 1  # watched from the version given


def test_a_threads_error_is_raised_where_the_inbox_is_read(
    server: FakeKubeServer, threads: JobThreads
) -> None:
    server.forbid("list", "pods")
    threads.start(job_uid="u1")
    with pytest.raises(Forbidden):
        updates_until(threads, 10)


def test_cancel_wakes_the_reader_and_the_log_is_not_waited_for(threads: JobThreads) -> None:
    threads.start(job_uid="u1")
    threads.cancel()
    assert threads.next_update() is None
    assert threads.cancelled
    assert not threads.drain_log()


def test_the_log_thread_ends_when_no_launcher_is_left_to_follow(threads: JobThreads) -> None:
    threads.start(job_uid="u1")
    threads.follow(None)
    assert threads.drain_log()
