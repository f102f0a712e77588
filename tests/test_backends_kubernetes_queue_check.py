"""queue_check: kubernetes.local_queue read before anything is submitted, on the scripted
cluster's real kube-apiserver with Kueue's CRDs (its 404s, its 403s): a LocalQueue that does not
exist or is stopped ends the run in one line; without the RBAC right, one warning and on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.backends.kubernetes.queue_check import check_local_queue
from ci_runner.clock import ManualClock
from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.errors import ConfigError
from testing.backend_harness import Cluster, cluster_on
from testing.fake_kube.server import FakeKubeServer
from testing.kueue_objects import API, KueueObjects
from testing.scripted_cluster.cluster import ScriptedCluster

TRAIN_YAML = """name: q
image: python:3.12
command: python train.py
kubernetes:
  local_queue: team-a
  queue_timeout: 1h
"""
CONFIG = load_config(TRAIN_YAML, "ml/train.yaml")


@pytest.fixture
def cluster(scripted: ScriptedCluster, tmp_path: Path) -> Iterator[Cluster]:
    with cluster_on(scripted, tmp_path) as cluster:
        yield cluster


def check(cluster: Cluster, config: TrainConfig = CONFIG) -> tuple[QueueInfo | None, list[str]]:
    warned: list[str] = []
    api = KubeApi(cluster.api_client(), cluster.namespace, ManualClock())
    return check_local_queue(api, config, warned.append), warned


@pytest.mark.control_plane
def test_a_local_queue_that_exists_gives_its_cluster_queue(cluster: Cluster) -> None:
    """Scripted: only kube-apiserver and Kueue's CRDs answer here; no node takes part."""
    with KueueObjects(cluster.admin) as kueue:
        kueue.local_queue(cluster.namespace, "team-a", "training")
        assert check(cluster) == (QueueInfo("team-a", "training", True, 3600), [])


@pytest.mark.control_plane
def test_a_local_queue_that_does_not_exist_is_one_problem_at_its_line(cluster: Cluster) -> None:
    """Scripted: only kube-apiserver and Kueue's CRDs answer here; no node takes part."""
    with pytest.raises(ConfigError) as raised:
        check(cluster)
    assert raised.value.lines() == [
        "ml/train.yaml:5: kubernetes.local_queue: LocalQueue team-a does not exist in namespace "
        f"{cluster.namespace}: Kueue would keep the job pending for ever; fix: name a "
        "LocalQueue of the namespace (kubectl get localqueues lists them), or ask the cluster's "
        "admin to create this one"
    ]


@pytest.mark.control_plane
def test_a_stopped_local_queue_ends_the_run(cluster: Cluster) -> None:
    """Scripted: only kube-apiserver and Kueue's CRDs answer here; no node takes part."""
    with KueueObjects(cluster.admin) as kueue:
        kueue.local_queue(cluster.namespace, "team-a", "training")
        path = f"{API}/namespaces/{cluster.namespace}/localqueues/team-a"
        cluster.admin.merge_patch(path, {"spec": {"stopPolicy": "Hold"}})
        with pytest.raises(ConfigError) as raised:
            check(cluster)
    assert raised.value.lines() == [
        "ml/train.yaml:5: kubernetes.local_queue: LocalQueue team-a is stopped (its stopPolicy "
        "is Hold): Kueue would keep the job pending; fix: ask the cluster's admin to start it, "
        "or name another LocalQueue of the namespace (kubectl get localqueues lists them)"
    ]


@pytest.mark.control_plane
def test_without_the_right_to_read_the_queue_it_warns_once_and_goes_on(cluster: Cluster) -> None:
    """Scripted: only kube-apiserver and Kueue's CRDs answer here; no node takes part."""
    role = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{cluster.namespace}/roles/ci-runner"
    found = cluster.admin.get(role)
    assert found is not None
    rules = [r for r in found["rules"] if "kueue.x-k8s.io" not in r["apiGroups"]]
    cluster.admin.merge_patch(role, {"rules": rules})
    with KueueObjects(cluster.admin) as kueue:
        kueue.local_queue(cluster.namespace, "team-a", "training")
        queue, warned = check(cluster)
    assert queue == QueueInfo("team-a", None, False, 3600)
    assert warned == [
        "cannot read Kueue's LocalQueue team-a or the job's Workload in namespace "
        f"{cluster.namespace} (no RBAC right to get localqueues or list workloads in "
        "kueue.x-k8s.io): going on without saying why the job waits; examples/rbac.yaml "
        "grants both"
    ]


def test_a_cluster_without_kueue_is_one_problem() -> None:
    with FakeKubeServer() as server:
        client = kubernetes.client.ApiClient(server.configuration())
        api = KubeApi(client, "ml", ManualClock())
        with pytest.raises(ConfigError) as raised:
            check_local_queue(api, CONFIG, print)
    assert raised.value.lines() == [
        "ml/train.yaml:5: kubernetes.local_queue: names a Kueue LocalQueue, but the cluster "
        "serves no localqueues.kueue.x-k8s.io (kueue.x-k8s.io/v1beta2): Kueue v0.15 or later "
        "is not installed; fix: install Kueue on the cluster, or remove kubernetes.local_queue"
    ]


def test_without_local_queue_nothing_is_asked() -> None:
    config = replace(CONFIG, kubernetes=replace(CONFIG.kubernetes, local_queue=None))
    with FakeKubeServer() as server:
        client = kubernetes.client.ApiClient(server.configuration())
        assert check_local_queue(KubeApi(client, "ml", ManualClock()), config, print) is None
