"""Watcher: list, then watch from the resourceVersion; drops, 410 Gone, bookmarks, odd events."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Forbidden
from ci_runner.backends.kubernetes.resources import SECRETS
from ci_runner.backends.kubernetes.watching import SYNC, Watcher, WatchUpdate
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY
from testing.fake_kube.server import FakeKubeServer


class Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[str, tuple[str, ...]]] = []
        self.cond = threading.Condition()

    def __call__(self, update: WatchUpdate) -> None:
        names = tuple(o["metadata"]["name"] for o in update.objects)
        with self.cond:
            self.updates.append((update.type, names))
            self.cond.notify_all()

    def wait_for(self, count: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.updates) >= count, timeout=20), self.updates


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


class Running:
    def __init__(self, server: FakeKubeServer, **kwargs: object) -> None:
        self.clock = ManualClock()
        client = kubernetes.client.ApiClient(server.configuration())
        api = KubeApi(client, "ml", self.clock, KUBERNETES_RETRY)
        self.seen = Recorder()
        self.watcher = Watcher(api, SECRETS, self.seen, **kwargs)  # type: ignore[arg-type]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.watcher.stop()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive()


def secret(server: FakeKubeServer, name: str, labels: dict[str, str] | None = None) -> None:
    server.store.create("secrets", "ml", {"metadata": {"name": name, "labels": labels or {}}})


def test_lists_then_watches_changes(server: FakeKubeServer) -> None:
    secret(server, "before")
    running = Running(server)
    server.wait_for_watches("secrets")
    secret(server, "after")
    server.store.delete("secrets", "ml", "before")
    running.seen.wait_for(3)
    running.stop()
    assert running.seen.updates == [
        (SYNC, ("before",)),
        ("ADDED", ("after",)),
        ("DELETED", ("before",)),
    ]
    watch = next(r for r in server.requests if r.verb == "watch")
    assert watch.param("resourceVersion") == "2"
    assert watch.param("allowWatchBookmarks") == "true"


def test_selectors_go_to_the_server(server: FakeKubeServer) -> None:
    running = Running(server, label_selector="app=a")
    server.wait_for_watches("secrets")
    secret(server, "other", {"app": "b"})
    secret(server, "mine", {"app": "a"})
    running.seen.wait_for(2)
    running.stop()
    assert running.seen.updates == [(SYNC, ()), ("ADDED", ("mine",))]


def test_a_dropped_watch_resumes_from_the_last_resource_version(server: FakeKubeServer) -> None:
    running = Running(server)
    server.wait_for_watches("secrets")
    secret(server, "one")
    running.seen.wait_for(2)
    server.drop_watches()
    server.wait_until(lambda: server.count("watch", "secrets") == 2)
    secret(server, "two")
    running.seen.wait_for(3)
    running.stop()
    assert running.seen.updates == [(SYNC, ()), ("ADDED", ("one",)), ("ADDED", ("two",))]
    assert server.count("list", "secrets") == 1
    assert [r.param("resourceVersion") for r in server.requests if r.verb == "watch"] == ["1", "2"]
    assert running.clock.sleeps == [1.0]


def test_410_gone_lists_again(server: FakeKubeServer) -> None:
    running = Running(server)
    server.wait_for_watches("secrets")
    secret(server, "one")
    running.seen.wait_for(2)
    server.expire_history()
    server.drop_watches()
    server.wait_until(lambda: server.count("list", "secrets") == 2)
    server.wait_for_watches("secrets")
    secret(server, "two")
    running.seen.wait_for(4)
    running.stop()
    assert running.seen.updates == [
        (SYNC, ()),
        ("ADDED", ("one",)),
        (SYNC, ("one",)),
        ("ADDED", ("two",)),
    ]


def test_410_as_an_http_status_lists_again(server: FakeKubeServer) -> None:
    server.fail_next(410, verb="watch", resource="secrets")
    running = Running(server)
    server.wait_for_watches("secrets")
    secret(server, "one")
    running.seen.wait_for(3)
    running.stop()
    assert running.seen.updates == [(SYNC, ()), (SYNC, ()), ("ADDED", ("one",))]
    assert running.clock.sleeps == []


def test_bookmarks_move_the_resource_version_without_an_update(server: FakeKubeServer) -> None:
    running = Running(server)
    server.wait_for_watches("secrets")
    server.store.create("configmaps", "ml", {"metadata": {"name": "elsewhere"}})
    server.store.bookmark()
    server.wait_until(lambda: True)
    server.drop_watches()
    server.wait_until(lambda: server.count("watch", "secrets") == 2)
    running.stop()
    assert running.seen.updates == [(SYNC, ())]
    assert [r.param("resourceVersion") for r in server.requests if r.verb == "watch"] == ["1", "2"]


def test_unknown_event_types_are_skipped(server: FakeKubeServer) -> None:
    running = Running(server)
    server.wait_for_watches("secrets")
    with server.store.cond:
        obj = {"metadata": {"name": "ghost", "namespace": "ml", "resourceVersion": "1"}}
        server.store.history.append((1, "secrets", "ml", "FROM-THE-FUTURE", obj))
        server.store.cond.notify_all()
    secret(server, "real")
    running.seen.wait_for(2)
    running.stop()
    assert running.seen.updates == [(SYNC, ()), ("ADDED", ("real",))]


def test_a_refused_watch_stops_with_the_error(server: FakeKubeServer) -> None:
    server.forbid("watch", "secrets")
    running = Running(server)
    running.thread.join(timeout=20)
    assert isinstance(running.error, Forbidden)
    assert running.error.verb == "watch"


def test_stop_interrupts_a_blocked_read(server: FakeKubeServer) -> None:
    running = Running(server)
    server.wait_for_watches("secrets")
    running.stop()
    assert running.error is None
