"""Kueue v0.17.0 on the real control plane (testing/control_plane/kueue.py): a suspended batch Job
or MPIJob that names a LocalQueue is admitted while its ClusterQueue's quota fits, waits with
Kueue's words when it does not, and a higher-priority job preempts a running one. Its webhooks,
conversion webhook and visibility API answer on loopback. One control plane per module, each test
in a namespace of its own with its own queues."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import requests

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.queue_position import Position, QueuePosition
from ci_runner.clock import ManualClock
from testing.control_plane import accounts
from testing.control_plane.kueue import Mode
from testing.control_plane.run import ControlPlane
from testing.kube_api import Api
from testing.kueue_objects import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    KueueObjects,
    condition,
    wait_condition,
    wait_workload,
)
from testing.scripted_cluster.cluster import ScriptedCluster, module_cluster
from testing.waiting import wait_for

pytestmark = pytest.mark.control_plane
JSON = dict[str, Any]
_serial = itertools.count()


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedCluster]:
    yield from module_cluster(tmp_path_factory.mktemp("kueue-logs"), kueue=Mode.RUNNING)


class Queues:
    """A test's namespace, with a LocalQueue ``lq`` on its own ClusterQueue of 1 cpu, 1Gi."""

    def __init__(self, plane: ControlPlane, objects: KueueObjects) -> None:
        self.plane = plane
        self.api = plane.admin_api()
        self.objects = objects
        serial = next(_serial)
        self.namespace = f"kueue-{serial}"
        self.cluster_queue = f"cq-{serial}"
        self.flavor = f"flavor-{serial}"
        accounts.create_namespace(self.api, self.namespace)
        objects.resource_flavor(self.flavor)
        objects.cluster_queue(self.cluster_queue, self.flavor, {"cpu": "1", "memory": "1Gi"})
        objects.local_queue(self.namespace, "lq", self.cluster_queue)

    def create(self, collection: str, manifest: JSON) -> JSON:
        created = self.api.create(collection.format(ns=self.namespace), manifest)
        assert created is not None
        return created

    def job(self, name: str, priority: str | None = None) -> JSON:
        """A suspended one-pod Job of 1 cpu in ``lq``."""
        labels = {QUEUE_LABEL: "lq", **({PRIORITY_LABEL: priority} if priority else {})}
        pod = {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": _requests()}],
        }
        manifest = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"suspend": True, "template": {"spec": pod}},
        }
        return self.create(JOBS, manifest)

    def suspended(self, name: str) -> bool:
        job = self.api.get(f"{JOBS.format(ns=self.namespace)}/{name}")
        assert job is not None
        return bool(job["spec"].get("suspend"))


JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"


def _requests(cpu: str = "1") -> JSON:
    return {"requests": {"cpu": cpu, "memory": "100Mi"}}


@pytest.fixture
def queues(kueue_cluster: ScriptedCluster) -> Iterator[Queues]:
    plane = kueue_cluster.plane.plane
    with KueueObjects(plane.admin_api()) as objects:
        yield Queues(plane, objects)


def test_a_job_within_quota_is_admitted_and_one_over_it_waits(queues: Queues) -> None:
    """Scripted: Kueue and the API server are what is tested; no pod needs to run."""
    first = queues.job("first")
    admitted = wait_condition(queues.api, queues.namespace, first["metadata"]["uid"], "Admitted",
                              "True")  # fmt: skip
    assert admitted["status"]["admission"]["clusterQueue"] == queues.cluster_queue
    assert admitted["metadata"]["name"].startswith("job-first-")
    assert admitted["metadata"]["ownerReferences"][0]["uid"] == first["metadata"]["uid"]
    wait_for("the first Job unsuspended", lambda: not queues.suspended("first"))

    second = queues.job("second")
    waiting = wait_condition(
        queues.api, queues.namespace, second["metadata"]["uid"], "QuotaReserved", "False"
    )
    reserved = condition(waiting, "QuotaReserved")
    assert reserved is not None
    assert (reserved["reason"], reserved["message"]) == (
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        f"{queues.flavor}, 1 more needed",
    )
    assert queues.suspended("second")


def test_a_higher_priority_job_preempts_a_running_one(queues: Queues) -> None:
    """Scripted: Kueue's preemption is what is tested; no pod needs to run."""
    queues.objects.workload_priority_class(f"low-{queues.namespace}", 100)
    queues.objects.workload_priority_class(f"high-{queues.namespace}", 1000)
    low = queues.job("low", priority=f"low-{queues.namespace}")
    wait_condition(queues.api, queues.namespace, low["metadata"]["uid"], "Admitted", "True")
    high = queues.job("high", priority=f"high-{queues.namespace}")
    preemptor = wait_condition(
        queues.api, queues.namespace, high["metadata"]["uid"], "Admitted", "True"
    )
    victim = wait_condition(
        queues.api, queues.namespace, low["metadata"]["uid"], "Preempted", "True"
    )
    evicted, preempted = condition(victim, "Evicted"), condition(victim, "Preempted")
    assert evicted is not None and preempted is not None
    cq = queues.cluster_queue
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, "
        f"JobUID: {high['metadata']['uid']}) due to prioritization in the ClusterQueue; "
        f"preemptor path: /{cq}; preemptee path: /{cq}"
    )
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "True",
        "Preempted",
        message,
    )
    assert (preempted["reason"], preempted["message"]) == ("InClusterQueue", message)
    wait_for("the preempted Job suspended again", lambda: queues.suspended("low"))


def test_an_mpijob_is_admitted(queues: Queues) -> None:
    """Scripted: Kueue's MPIJob integration is what is tested; the operator makes the pods."""
    container = {"name": "main", "image": "busybox", "resources": _requests("250m")}
    replica = {"replicas": 1, "template": {"spec": {"containers": [container]}}}
    manifest = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi", "labels": {QUEUE_LABEL: "lq"}},
        "spec": {
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {"Launcher": replica, "Worker": {**replica, "replicas": 2}},
        },
    }
    mpijob = queues.create(MPIJOBS, manifest)
    workload = wait_condition(
        queues.api, queues.namespace, mpijob["metadata"]["uid"], "Admitted", "True"
    )
    assert workload["metadata"]["name"].startswith("mpijob-mpi-")
    assert [(s["name"], s["count"]) for s in workload["spec"]["podSets"]] == [
        ("launcher", 1),
        ("worker", 2),
    ]
    path = f"{MPIJOBS.format(ns=queues.namespace)}/mpi"
    wait_for(
        "the MPIJob unsuspended",
        lambda: (queues.api.get(path) or {})["spec"]["runPolicy"].get("suspend") is False,
    )


def test_a_job_of_a_missing_local_queue_waits_inadmissible(queues: Queues) -> None:
    """Scripted: Kueue's answer is what is tested; no pod needs to run."""
    labels = {QUEUE_LABEL: "no-such-queue"}
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "lost", "labels": labels},
        "spec": {"suspend": True, "template": {"spec": pod}},
    }
    job = queues.create(JOBS, manifest)
    workload = wait_condition(
        queues.api, queues.namespace, job["metadata"]["uid"], "QuotaReserved", "False"
    )
    reserved = condition(workload, "QuotaReserved")
    assert reserved is not None
    assert (reserved["reason"], reserved["message"]) == (
        "Inadmissible",
        "LocalQueue no-such-queue doesn't exist",
    )


def test_v1beta1_reads_convert_and_the_visibility_api_answers(queues: Queues) -> None:
    """Scripted: the conversion webhook and the visibility server on loopback are tested."""
    job = queues.job("seen")
    workload = wait_workload(queues.api, queues.namespace, job["metadata"]["uid"])
    name = workload["metadata"]["name"]
    old = queues.api.get(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{queues.namespace}/workloads/"
                         f"{name}")  # fmt: skip
    assert old is not None and old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    ports = queues.plane.kueue_ports
    assert ports is not None
    pending = requests.get(
        f"https://127.0.0.1:{ports.visibility}/apis/visibility.kueue.x-k8s.io/v1beta2/"
        f"namespaces/{queues.namespace}/localqueues/lq/pendingworkloads",
        headers={"Authorization": f"Bearer {queues.plane.admin_token}"},
        verify=str(queues.plane.ca),
        timeout=10,
    )
    assert pending.status_code == 200, pending.text
    assert pending.json()["kind"] == "PendingWorkloadsSummary"


def test_kueue_is_ready_before_start_returns(kueue_cluster: ScriptedCluster) -> None:
    """Scripted: a check of the control plane's start itself."""
    plane = kueue_cluster.plane.plane
    assert plane.kueue_start_seconds is not None
    kueue_log = Path(plane.state) / "kueue.log"
    assert "Starting manager" in kueue_log.read_text()
    api: Api = plane.admin_api()
    served = api.get("/apis/kueue.x-k8s.io")
    assert served is not None
    assert [v["version"] for v in served["versions"]] == ["v1beta2", "v1beta1"]


def test_ci_runners_queue_position_is_kueues_visibility_api_answer(queues: Queues) -> None:
    """Scripted: ci-runner's QueuePosition against Kueue's own visibility server (on loopback:
    kube-apiserver here has no APIService for it); no pod needs to run."""
    first = queues.job("first")
    wait_condition(queues.api, queues.namespace, first["metadata"]["uid"], "Admitted", "True")
    waiting = [queues.job(name) for name in ("second", "third")]
    uids = [str(job["metadata"]["uid"]) for job in waiting]
    pending = [
        wait_condition(queues.api, queues.namespace, uid, "QuotaReserved", "False") for uid in uids
    ]
    names = [str(workload["metadata"]["name"]) for workload in pending]
    ports = queues.plane.kueue_ports
    assert ports is not None
    configuration = kubernetes.client.Configuration()
    configuration.host = f"https://127.0.0.1:{ports.visibility}"
    configuration.ssl_ca_cert = str(queues.plane.ca)
    configuration.api_key = {"authorization": f"Bearer {queues.plane.admin_token}"}
    api = KubeApi(kubernetes.client.ApiClient(configuration), queues.namespace, ManualClock())
    position = QueuePosition(api, "lq")
    # Created in the same second, their order between them is Kueue's to choose.
    assert sorted(position.of(name) or Position(0, 0) for name in names) == [
        Position(1, 2),
        Position(2, 2),
    ]
    assert position.of("job-first-admitted-already") is None
    assert position.served
    # A LocalQueue the API does not know (404): no position, and no more questions.
    missing = QueuePosition(api, "no-such-queue")
    assert missing.of(names[0]) is None
    assert not missing.served
