"""KubernetesBackend when no node has room: still on the in-process fake API server and the
Python control plane (testing/fake_kube/), until the scripted cluster can take the nodes' GPUs
away (set_allocatable, workers_unschedulable: another helper's work); then it moves to
test_backends_kubernetes_backend.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ci_runner.backends.result import Failure, FailureKind
from testing.fake_kube.harness import Cluster, running_cluster
from testing.fake_kube.scenarios import INSUFFICIENT_GPU
from testing.mpijob_manifests import JOB, NAMESPACE

SUBMITTED = f"[ci-runner] submitted MPIJob {JOB} in namespace {NAMESPACE}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path) as cluster:
        yield cluster


def assert_all_gone(cluster: Cluster) -> None:
    store = cluster.server.store
    for key in ("pods", "secrets", "configmaps", "services", "jobs.batch", "mpijobs.kubeflow.org"):
        items, _ = store.list(key, NAMESPACE)
        assert items == [], key


def test_unschedulable_fails_after_the_timeout_with_the_schedulers_message(
    cluster: Cluster,
) -> None:
    cluster.operator.set_allocatable("nvidia.com/gpu", "0")  # the GPUs are all taken
    job = cluster.started(unschedulable_timeout=600)
    job.workers_unschedulable()
    cluster.log.wait_for(f"[ci-runner] workers pending: {INSUFFICIENT_GPU}")
    cluster.clock.advance(599)
    job.workers_unschedulable()  # the scheduler tries again, in vain
    cluster.clock.advance(2)
    job.workers_unschedulable()
    result = cluster.result()
    message = f"pod {JOB}-worker-0 stayed unschedulable for 601s: {INSUFFICIENT_GPU}"
    assert cluster.log.lines == [
        SUBMITTED,
        f"[ci-runner] workers pending: {INSUFFICIENT_GPU}",
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert result.failure == Failure(FailureKind.UNSCHEDULABLE, message, pod=f"{JOB}-worker-0")
    assert_all_gone(cluster)
