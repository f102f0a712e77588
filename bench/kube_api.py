"""4. Kubernetes API cost.

The real :class:`~ci_runner.backends.kubernetes.backend.KubernetesBackend` against the scripted
cluster (``testing/scripted_cluster``: the real kube-apiserver, controllers, scheduler and MPI
Operator v0.8.2, the bench playing the nodes' part), as examples/rbac.yaml's ServiceAccount,
through the cluster's proxy that counts every request and can end open watches
(``testing/scripted_cluster/faults.py``). A one-hour job in simulated time (the backend's
:class:`~ci_runner.clock.ManualClock` is moved on, nothing sleeps an hour): workers and launcher
start, the launcher logs a loss line a minute, and every five minutes a watch is dropped, then the
launcher succeeds. Two readings of "a watch dropped" (ended as kube-apiserver ends one at its
``timeoutSeconds``): one open watch (in turn), and every open watch at once (what a real API server
does when each watch asks for ``timeoutSeconds=300``, as ours do).
While the job runs steadily the backend watches its pods alone (the MPIJob watch paused, the Events
watch stopped for good), so in that hour both readings drop the pods watch; when the launcher ends,
its pod's Succeeded decides the job (the operator's Succeeded comes about a second later).

Targets: at most 30 requests in all (a loop polling the MPIJob every 5 s would make 720 in that
hour), and ``run()`` returns within 1 s (wall time) of the Succeeded condition being set (seen by
the bench polling the MPIJob; the control plane's own reaction to the launcher's exit is shown
beside it).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.common import INFO, Row, check, median, say, spread
from ci_runner.backends.result import Outcome
from testing.backend_harness import Cluster, cluster_on
from testing.control_plane import binaries
from testing.scripted_cluster.cluster import ScriptedCluster
from testing.scripted_cluster.faults import FaultProxy
from testing.scripted_cluster.scenarios import MPIJOBS

NAME = "4 Kubernetes API"
MAX_REQUESTS = 30
MAX_EXIT_SECONDS = 1.0
POLL_SECONDS = 5
JOB_SECONDS = 3600
DROP_EVERY = 300
WATCHED = ("events", "mpijobs", "pods")
WAIT = 30.0  # real seconds to wait for the backend to react before giving up


def _wait(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}: {condition()}")
        time.sleep(0.005)


def why_not_here() -> str | None:
    """Why the scripted cluster cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "needs root (the scripted cluster makes a network namespace and a cgroup)"
    if not binaries.built():
        return "no control-plane binaries (make control-plane)"
    return None


@dataclass
class Reading:
    """One job's figures."""

    requests: int
    exit_seconds: float  # Succeeded -> run() returns
    control_plane_seconds: float  # the launcher exits 0 -> the MPIJob Succeeded
    kinds: dict[str, int]
    drops: int


def one_job(scripted: ScriptedCluster, work: Path, drop_all: bool) -> Reading:
    """One simulated hour's job in a namespace of ``scripted``."""
    with cluster_on(scripted, work) as cluster:
        return _play(cluster, cluster.api, drop_all)


def _open(proxy: FaultProxy) -> list[str]:
    """The watched resources with a watch open now."""
    return sorted(key for key in proxy.watching() if key in WATCHED)


def _back(proxy: FaultProxy, watches: int, resources: set[str]) -> bool:
    """``watches`` watches were asked for in all, and each of ``resources`` is watched again."""
    return proxy.count("watch") >= watches and resources <= proxy.watching()


def _succeeded(cluster: Cluster, name: str) -> bool:
    """The MPIJob has its Succeeded condition (set by the operator), or is gone already (the
    backend saw it first and deleted it)."""
    found = cluster.admin.get(f"{MPIJOBS.format(ns=cluster.namespace)}/{name}")
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return found is None or any(
        c["type"] == "Succeeded" and c["status"] == "True" for c in conditions
    )


def _play(cluster: Cluster, proxy: FaultProxy, drop_all: bool) -> Reading:
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    job.launcher_log("[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4, Worker: 0")
    cluster.log.wait_for("[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4, Worker: 0")
    _wait(lambda: _open(proxy) == ["pods"], "the backend to watch its pods alone")
    drops = 0
    for minute in range(1, JOB_SECONDS // 60):
        cluster.clock.advance(60)
        line = f"[0]<stdout>:Training. Epoch {minute}, MSE loss: {1000 / minute}, Worker: 0"
        job.launcher_log(line)
        cluster.log.wait_for(line)
        if minute * 60 % DROP_EVERY != 0:
            continue
        watches = proxy.count("watch")
        watched = _open(proxy)
        proxy.end_watches(None if drop_all else watched[drops % len(watched)])
        drops += 1
        expected = watches + (len(watched) if drop_all else 1)
        proxy.wait_until(partial(_back, proxy, expected, set(watched)))
    cluster.clock.advance(60)
    exited = time.perf_counter()
    job.launcher_exits(0)
    _wait(lambda: _succeeded(cluster, job.name), "the MPIJob Succeeded")
    succeeded = time.perf_counter()
    result = cluster.result()
    exit_seconds = time.perf_counter() - succeeded
    if result.outcome is not Outcome.SUCCEEDED:
        raise RuntimeError(f"the job ended {result.outcome.value}: {result.failure}")
    kinds = proxy.counts()
    return Reading(sum(kinds.values()), exit_seconds, succeeded - exited, kinds, drops)


def run(quick: bool) -> list[Row]:
    problem = why_not_here()
    if problem is not None:
        return [Row(NAME, "skipped", problem)]
    with tempfile.TemporaryDirectory(prefix="ci-runner-bench-kube-") as state:
        scripted = ScriptedCluster(Path(state)).start()
        try:
            return _rows(scripted, quick)
        finally:
            scripted.stop()


def _rows(scripted: ScriptedCluster, quick: bool) -> list[Row]:
    repeats = 2 if quick else 5
    rows: list[Row] = []
    exits: list[float] = []
    reactions: list[float] = []
    for drop_all in (False, True):
        counts: list[int] = []
        kinds: dict[str, int] = {}
        drops = 0
        what = "every open watch" if drop_all else "one watch"
        for i in range(repeats):
            say(f"one-hour job, {what} dropped every 5 min: run {i + 1} of {repeats}")
            with tempfile.TemporaryDirectory(prefix="ci-runner-bench-kube-") as tmp:
                reading = one_job(scripted, Path(tmp), drop_all)
            counts.append(reading.requests)
            exits.append(reading.exit_seconds)
            reactions.append(reading.control_plane_seconds)
            kinds, drops = reading.kinds, reading.drops
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
            "launcher exits 0 -> MPIJob Succeeded (the control plane; wall)",
            spread(reactions, digits=3),
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
