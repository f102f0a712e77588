"""The fake control plane does what MPI Operator v0.8.2, the Job controller, the scheduler and the
garbage collector do for representative MPIJobs: the exact objects, status and Events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_kube import crd
from testing.fake_kube.admission import Denial, Quota, webhook_denial
from testing.fake_kube.scenarios import INSUFFICIENT_GPU, MPIJOBS, JobScenario, MpiOperator
from testing.fake_kube.server import FakeKubeServer
from testing.mpijob_manifests import IMAGE, NAMESPACE, mpijob_manifest

JSON = dict[str, Any]


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeServer, MpiOperator]]:
    with FakeKubeServer() as server:
        yield server, MpiOperator(server)


def submit(cluster: tuple[FakeKubeServer, MpiOperator], manifest: JSON) -> JobScenario:
    server, operator = cluster
    assert crd.validate_mpijob(manifest) == []
    server.handle("create", MPIJOBS, NAMESPACE, body=manifest)
    return operator.job(manifest["metadata"]["name"], NAMESPACE)


def events(server: FakeKubeServer, name: str | None = None) -> list[tuple[str, str, str, int]]:
    """(type, reason, message, count) of the Events about ``name`` (every object when None)."""
    items, _ = server.store.list("events", NAMESPACE)
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [
        (e["type"], e["reason"], e["message"], e["count"])
        for e in items
        if name is None or e["involvedObject"]["name"] == name
    ]


def conditions(job: JobScenario) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job.mpijob["status"]["conditions"]]


def test_objects_of_an_at_startup_job(cluster: tuple[FakeKubeServer, MpiOperator]) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j"))
    store = server.store
    owner = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "j",
        "uid": job.mpijob["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    config = store.get("configmaps", NAMESPACE, "j-config")
    assert config["data"] == {
        "hostfile": "j-worker-0.j.ml.svc slots=1\nj-worker-1.j.ml.svc slots=1\n",
        "discover_hosts.sh": "#!/bin/sh\n",
    }
    assert config["metadata"]["ownerReferences"] == [owner]
    service = store.get("services", NAMESPACE, "j")
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": "j",
        },
        "publishNotReadyAddresses": False,
    }
    secret = store.get("secrets", NAMESPACE, "j-ssh")
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert sorted(secret["data"]) == ["ssh-privatekey", "ssh-publickey"]
    worker = store.get("pods", NAMESPACE, "j-worker-1")
    assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert worker["spec"]["containers"][0]["env"][-1] == {
        "name": "K_MPI_JOB_ROLE",
        "value": "worker",
    }
    assert worker["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "ssh-auth", "mountPath": "/root/.ssh"}
    ]
    assert worker["spec"]["hostname"] == "j-worker-1"
    assert worker["spec"]["subdomain"] == "j"
    assert worker["spec"]["dnsConfig"] == {"searches": ["j.ml.svc.cluster.local"]}
    assert worker["metadata"]["ownerReferences"] == [owner]
    launcher = store.get("jobs.batch", NAMESPACE, "j-launcher")
    assert launcher["metadata"]["ownerReferences"] == [owner]
    assert {k: launcher["spec"][k] for k in ("backoffLimit", "podReplacementPolicy")} == {
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
    }
    env = launcher["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[1:] == [
        {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
        {"name": "OMPI_MCA_orte_set_default_slots", "value": "1"},
        {"name": "NVIDIA_VISIBLE_DEVICES"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES"},
    ]
    (pod,) = job.launcher_pods()
    assert pod.startswith("j-launcher-") and len(pod) == len("j-launcher-") + 5
    assert conditions(job) == [("Created", "True", "MPIJobCreated")]
    assert crd.validate_mpijob(job.mpijob) == []  # the status too, against the CRD
    assert events(server, "j") == [("Normal", "MPIJobCreated", "MPIJob ml/j is created.", 1)]
    assert events(server, "j-launcher") == [
        ("Normal", "SuccessfulCreate", f"Created pod: {pod}", 1)
    ]
    assert events(server, "j-worker-0") == [
        ("Normal", "Scheduled", "Successfully assigned ml/j-worker-0 to node-1", 1)
    ]


def test_wait_for_workers_ready_creates_the_launcher_only_then(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j", wait_for_workers=True, setup=True))
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is None
    job.workers_running([0])
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is None
    job.workers_running([1])
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is not None
    job.launcher_running()
    assert conditions(job) == [
        ("Created", "True", "MPIJobCreated"),
        ("Running", "True", "MPIJobRunning"),
    ]
    assert job.mpijob["status"]["replicaStatuses"] == {
        "Launcher": {"active": 1},
        "Worker": {"active": 2},
    }


def test_a_worker_failing_in_setup_is_not_replaced_and_sets_no_condition(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j", wait_for_workers=True, setup=True))
    job.workers_running([0])
    job.worker_init_fails(1, "install-requirements", 1, "ERROR: No matching distribution")
    server.advance(3600)
    pod = server.store.get("pods", NAMESPACE, "j-worker-1")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["initContainerStatuses"][1]["state"]["terminated"]["exitCode"] == 1
    assert job.workers() == ["j-worker-0", "j-worker-1"]  # the same pod, never recreated
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is None
    assert conditions(job) == [("Created", "True", "MPIJobCreated")]
    assert job.mpijob["status"]["replicaStatuses"] == {"Worker": {"active": 1, "failed": 1}}


def test_quota_refusing_a_worker_is_only_a_warning_event(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    server.admission.quotas.append(Quota("gpu", NAMESPACE, {"requests.nvidia.com/gpu": "1"}))
    job = submit(cluster, mpijob_manifest("j", wait_for_workers=True))
    message = (
        'worker pod created failed: pods "j-worker-1" is forbidden: exceeded quota: gpu, '
        "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, "
        "limited: requests.nvidia.com/gpu=1"
    )
    # syncHandler returns before updating the status: no condition is ever stored, so every
    # retry announces the job as created again.
    created = ("Normal", "MPIJobCreated", "MPIJob ml/j is created.")
    assert {e[:3] for e in events(server, "j")} == {created, ("Warning", "MPIJobFailed", message)}
    before = dict((e[1], e[3]) for e in events(server, "j"))
    server.advance(3)  # the work queue retries, in vain
    after = dict((e[1], e[3]) for e in events(server, "j"))
    assert after["MPIJobFailed"] == before["MPIJobFailed"] + 3
    assert job.workers() == ["j-worker-0"]
    assert "status" not in job.mpijob


def test_launcher_retried_under_backoff_limit_then_succeeds(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j", backoff_limit=1))
    job.workers_running()
    job.launcher_running()
    first = job.launcher_pod
    job.launcher_exits(1)
    assert job.launcher_pods() == [first]  # back-off: 10 s before the next pod
    assert ("Running", "True", "MPIJobRunning") in conditions(job)
    server.advance(10)
    second = job.launcher_pod
    assert job.launcher_pods() == [first, second]
    job.launcher_running()
    job.launcher_exits(0)
    assert conditions(job) == [
        ("Created", "True", "MPIJobCreated"),
        ("Running", "False", "MPIJobRunning"),
        ("Succeeded", "True", "MPIJobSucceeded"),
    ]
    assert job.mpijob["status"]["replicaStatuses"]["Launcher"] == {"failed": 1, "succeeded": 1}
    assert crd.validate_mpijob(job.mpijob) == []
    launcher = server.store.get("jobs.batch", NAMESPACE, "j-launcher")
    assert [(c["type"], c["reason"]) for c in launcher["status"]["conditions"]] == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]


def test_launcher_failure_copies_the_jobs_reason(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j"))
    job.workers_running()
    job.launcher_running()
    job.worker_oom_killed(1)
    job.launcher_exits(1)
    assert conditions(job)[-1] == ("Failed", "True", "BackoffLimitExceeded/")
    failed = job.mpijob["status"]["conditions"][-1]
    assert failed["message"] == "Job has reached the specified backoff limit: "
    assert ("Warning", "BackoffLimitExceeded/", failed["message"], 1) in events(server, "j")
    assert crd.validate_mpijob(job.mpijob) == []
    # cleanPodPolicy Running: the running worker goes, the OOMKilled one stays
    assert job.workers() == ["j-worker-1"]


def test_deadline_and_ttl_apply_to_the_launcher_job_only(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j", deadline=600, ttl=60))
    job.workers_running()
    job.launcher_running()
    job.deadline_exceeded()
    assert conditions(job)[-1] == ("Failed", "True", "DeadlineExceeded")
    server.advance(60)
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is None
    assert job.pods() == []
    left = sorted(
        (k, n) for (k, ns, n) in server.store.objects if ns == NAMESPACE and k != "events"
    )
    assert left == [
        ("configmaps", "j-config"),
        (MPIJOBS, "j"),
        ("secrets", "j-ssh"),
        ("services", "j"),
    ]


def test_validation_error_is_an_event_and_nothing_else(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit_unchecked(cluster, mpijob_manifest("j", launcher_replicas=2))
    assert "status" not in job.mpijob
    assert events(server) == [
        (
            "Warning",
            "ValidationError",
            "Found validation errors: spec.mpiReplicaSpecs.Launcher.replicas: must be exactly 1",
            1,
        )
    ]
    assert job.pods() == []


def submit_unchecked(cluster: tuple[FakeKubeServer, MpiOperator], manifest: JSON) -> JobScenario:
    server, operator = cluster
    server.handle("create", MPIJOBS, NAMESPACE, body=manifest)
    return operator.job(manifest["metadata"]["name"], NAMESPACE)


def test_scheduler_messages(cluster: tuple[FakeKubeServer, MpiOperator]) -> None:
    server, operator = cluster
    operator.set_allocatable("nvidia.com/gpu", "0")
    job = submit(cluster, mpijob_manifest("j"))
    job.workers_unschedulable(INSUFFICIENT_GPU)
    assert events(server, "j-worker-0") == [("Warning", "FailedScheduling", INSUFFICIENT_GPU, 2)]
    node = server.store.get("nodes", "", "node-1")
    node["spec"]["taints"] = [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    server.handle("update", "nodes", "", "node-1", body=node)
    server.handle("update", "nodes", "", "node-1", body={"status": node["status"]}, sub="status")
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: a100}, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
        "1 Preemption is not helpful for scheduling, 2 No preemption victims found for "
        "incoming pod."
    )
    job.workers_unschedulable(message)


def test_delete_in_the_foreground_waits_for_the_pods(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, operator = cluster
    job = submit(cluster, mpijob_manifest("j"))
    job.workers_running()
    operator.kubelet.slow_termination = True
    server.handle("delete", MPIJOBS, NAMESPACE, "j", body={"propagationPolicy": "Foreground"})
    assert job.mpijob["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert server.store.find("pods", NAMESPACE, "j-worker-0") is not None
    with pytest.raises(
        Exception, match=r'object is being deleted: pods "j-worker-0" already exists'
    ):
        server.handle(
            "create", "pods", NAMESPACE, body={"metadata": {"name": "j-worker-0"}, "spec": {}}
        )
    server.advance(30)
    assert [k for k in server.store.objects if k[1] == NAMESPACE and k[0] != "events"] == []


def test_image_pull_error_recovers_after_back_off(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    job = submit(cluster, mpijob_manifest("j"))
    job.image_pull_fails("j-worker-0", failures=2)
    state = server.store.get("pods", NAMESPACE, "j-worker-0")["status"]["containerStatuses"][0]
    assert state["state"]["waiting"]["reason"] == "ErrImagePull"
    server.advance(1)  # the next sync reports the back-off
    state = server.store.get("pods", NAMESPACE, "j-worker-0")["status"]["containerStatuses"][0]
    assert state["state"]["waiting"] == {
        "reason": "ImagePullBackOff",
        "message": f'Back-off pulling image "{IMAGE}"',
    }
    server.advance(30)
    state = server.store.get("pods", NAMESPACE, "j-worker-0")["status"]["containerStatuses"][0]
    assert state["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert [e for e in events(server, "j-worker-0") if e[1] in ("Pulled", "BackOff")] == [
        ("Normal", "BackOff", f'Back-off pulling image "{IMAGE}"', 2),
        (
            "Normal",
            "Pulled",
            f'Successfully pulled image "{IMAGE}" in 1.5s (1.5s including '
            "waiting). Image size: 1024 bytes.",
            1,
        ),
    ]
    job.workers_running()
    assert server.store.get("pods", NAMESPACE, "j-worker-0")["status"]["phase"] == "Running"


def test_a_refused_launcher_job_is_only_a_warning_event(
    cluster: tuple[FakeKubeServer, MpiOperator],
) -> None:
    server, _ = cluster
    refusal = webhook_denial("jobs.policy.example.com", "launchers need a team label")
    server.admission.denials.append(Denial("jobs.batch", refusal))
    job = submit(cluster, mpijob_manifest("j"))
    message = (
        'launcher pod created failed: admission webhook "jobs.policy.example.com" denied the '
        "request: launchers need a team label"
    )
    assert ("Warning", "MPIJobFailed", message) in {e[:3] for e in events(server, "j")}
    assert server.store.find("jobs.batch", NAMESPACE, "j-launcher") is None
    assert job.workers() == ["j-worker-0", "j-worker-1"]
    assert "status" not in job.mpijob
