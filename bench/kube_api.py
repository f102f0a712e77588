"""4. Kubernetes API cost.

The real :class:`~ci_runner.backends.kubernetes.backend.KubernetesBackend` against the fake API
server and MPI Operator of the test suite (``testing/fake_kube``),
over real HTTP. A one-hour job in simulated time (the backend's
:class:`~ci_runner.clock.ManualClock` is moved on, nothing sleeps an hour): workers and launcher
start, the launcher logs a loss line a minute, and every five minutes a watch is dropped, then the
launcher succeeds. Two readings of "a watch dropped": one open watch (in turn), and every open watch
at once (what a real API server does when each watch asks for ``timeoutSeconds=300``, as ours do).
While the job runs steadily the backend watches its pods alone (the MPIJob watch paused, the Events
watch stopped for good), so in that hour both readings drop the pods watch; when the launcher ends,
the backend lists the MPIJob once and sees Succeeded.

Targets: at most 30 requests in all (a loop polling the MPIJob every 5 s would make 720 in that
hour), and ``run()`` returns within 1 s (wall time) of the Succeeded condition being set.
"""

from __future__ import annotations

import collections
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import INFO, Row, check, median, say, spread
from ci_runner.backends.result import Outcome
from testing.fake_kube.harness import Cluster
from testing.fake_kube.server import FakeKubeServer

NAME = "4 Kubernetes API"
MAX_REQUESTS = 30
MAX_EXIT_SECONDS = 1.0
POLL_SECONDS = 5
JOB_SECONDS = 3600
DROP_EVERY = 300
WATCHED = ("mpijobs.kubeflow.org", "pods", "events")
WAIT = 20.0  # real seconds to wait for the backend to react before giving up


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


class DroppingServer(FakeKubeServer):
    """The fake API server, able to drop the open watches of one resource only.

    The fake drops a watch when the drop counter it read at the start of the watch changes;
    here that counter is per resource, read on the thread serving the watch.
    """

    def __init__(self) -> None:
        self._serving = threading.local()
        self._all_drops = 0
        self._drops_of: collections.Counter[str] = collections.Counter()
        super().__init__()

    @property
    def _drops(self) -> int:
        return self._all_drops + self._drops_of[getattr(self._serving, "key", "")]

    @_drops.setter
    def _drops(self, value: int) -> None:  # FakeKubeServer.drop_watches(): every watch
        self._all_drops = value

    def _serve_watch(self, handler: Any, key: str, namespace: str, query: Any) -> None:
        self._serving.key = key
        super()._serve_watch(handler, key, namespace, query)

    def drop_watch(self, key: str) -> None:
        """Cut the open watches of ``key`` (e.g. "pods") only."""
        with self.store.cond:
            self._drops_of[key] += 1
            self.store.cond.notify_all()


def one_job(work: Path, drop_all: bool) -> tuple[int, float, dict[str, int], int]:
    """(requests, seconds from Succeeded to ``run()`` returning, requests by kind, drops)."""
    server = DroppingServer()
    server.start()
    cluster = Cluster(server, work)
    try:
        return _play(cluster, server, drop_all)
    finally:
        backend = cluster.backend_under_test
        if backend is not None and cluster._thread is not None and cluster._thread.is_alive():
            backend.cancel()
            cluster._thread.join(timeout=WAIT)
        server.stop()


def _open(server: DroppingServer) -> list[str]:
    """The watched resources with a watch open now."""
    with server.store.cond:
        return [key for key in WATCHED if server.open_watches.get(key, 0) > 0]


def _play(
    cluster: Cluster, server: DroppingServer, drop_all: bool
) -> tuple[int, float, dict[str, int], int]:
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    job.launcher_log("[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4, Worker: 0")
    cluster.log.wait_for("[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4, Worker: 0")
    _wait(lambda: _open(server) == ["pods"], "the backend to watch its pods alone")
    drops = 0
    for minute in range(1, JOB_SECONDS // 60):
        cluster.clock.advance(60)
        line = f"[0]<stdout>:Training. Epoch {minute}, MSE loss: {1000 / minute}, Worker: 0"
        job.launcher_log(line)
        cluster.log.wait_for(line)
        if minute * 60 % DROP_EVERY != 0:
            continue
        watches = sum(r.verb == "watch" for r in server.requests)
        watched = _open(server)
        if drop_all:
            server.drop_watches()
        else:
            server.drop_watch(watched[drops % len(watched)])
        drops += 1
        expected = watches + (len(watched) if drop_all else 1)
        _wait(
            lambda n=expected, keys=watched: (
                sum(r.verb == "watch" for r in server.requests) >= n
                and all(server.open_watches.get(k, 0) > 0 for k in keys)
            ),
            "the watches to come back",
        )
    cluster.clock.advance(60)
    job.launcher_exits(0)
    succeeded = time.perf_counter()
    result = cluster.result()
    exit_seconds = time.perf_counter() - succeeded
    if result.outcome is not Outcome.SUCCEEDED:
        raise RuntimeError(f"the job ended {result.outcome.value}: {result.failure}")
    kinds = collections.Counter(f"{r.verb} {r.resource}" for r in server.requests)
    return len(server.requests), exit_seconds, dict(kinds), drops


def run(quick: bool) -> list[Row]:
    repeats = 2 if quick else 5
    rows: list[Row] = []
    exits: list[float] = []
    for drop_all in (False, True):
        counts: list[int] = []
        kinds: dict[str, int] = {}
        drops = 0
        what = "every open watch" if drop_all else "one watch"
        for i in range(repeats):
            say(f"one-hour job, {what} dropped every 5 min: run {i + 1} of {repeats}")
            with tempfile.TemporaryDirectory(prefix="ci-runner-bench-kube-") as tmp:
                count, exit_seconds, kinds, drops = one_job(Path(tmp), drop_all)
            counts.append(count)
            exits.append(exit_seconds)
        requests = int(median(counts))
        breakdown = ", ".join(
            f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda k: -k[1])
        )
        rows.append(
            Row(
                NAME,
                f"requests, 1 h job, {what} dropped every {DROP_EVERY // 60} min",
                f"{requests} (runs: {', '.join(map(str, counts))})",
                f"<= {MAX_REQUESTS}",
                check(requests <= MAX_REQUESTS),
                f"{drops} drops; requests: {breakdown}",
            )
        )
    rows += [
        Row(
            NAME,
            f"a {POLL_SECONDS} s polling loop, same hour (computed)",
            f"{JOB_SECONDS // POLL_SECONDS} GETs of the MPIJob alone",
            verdict=INFO,
        ),
        Row(
            NAME,
            "Succeeded -> run() returns (wall)",
            spread(exits, digits=3),
            f"<= {MAX_EXIT_SECONDS:.0f} s",
            check(median(exits) <= MAX_EXIT_SECONDS),
        ),
    ]
    return rows
