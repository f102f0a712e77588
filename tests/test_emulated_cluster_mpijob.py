"""An MPIJob submitted to the emulated cluster runs for real: the real MPI Operator v0.8.2 and
Job controller create its objects, kube-scheduler binds the pods to the real nodes, their
kubelets and containerd run them, and the launcher's log comes through the API server's
``pods/log`` proxy (slow: real sshd, ssh and mpirun in pods).

An upstream-shaped worker (no command, so the operator's ``/usr/sbin/sshd -De``,
mpi_job_controller.go:1529-1531 at v0.8.2, with Debian's sshd config: StrictModes yes) refuses
the operator's key on its Secret volume, as on a real cluster; the same job with sshd told not
to check modes reaches both workers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from testing.emulated_cluster.harness import IMAGE, NAMESPACE, Emulated, emulated
from testing.host import marks

pytestmark = pytest.mark.slow
JSON = dict[str, Any]
MPIJOBS = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"
FIRST_HOST = "$(head -n 1 /etc/mpi/hostfile | cut -d ' ' -f 1)"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Emulated]:
    with emulated(nodes=2) as running:
        yield running
    # Taken by stop() before it let the machine go (another run may start right after).
    assert running.side.left_behind is not None
    assert running.side.left_behind == {key: [] for key in running.side.left_behind}


def mpijob(
    name: str, launcher: str, worker_command: list[str] | None, **launcher_spec: Any
) -> JSON:
    worker: JSON = {"name": "worker", "image": IMAGE}
    if worker_command is not None:
        worker["command"] = worker_command
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": IMAGE,
                                    "command": ["/bin/sh", "-c", launcher],
                                }
                            ],
                            **launcher_spec,
                        }
                    },
                },
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [worker]}},
                },
            },
        },
    }


def run(cluster: Emulated, job: JSON, timeout: float = 90) -> tuple[str, str, list[str]]:
    """Submit ``job``; (launcher phase, launcher log via the API server, the nodes of its pods)."""
    name = job["metadata"]["name"]
    assert cluster.api.create(MPIJOBS, job) is not None
    selector = f"training.kubeflow.org/job-name={name}"
    deadline = time.time() + timeout
    while True:
        pods, _ = cluster.api.list(
            f"/api/v1/namespaces/{NAMESPACE}/pods", {"labelSelector": selector}
        )
        launchers = [
            p
            for p in pods
            if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "launcher"
        ]
        phase = ((launchers[0].get("status") or {}).get("phase")) if launchers else None
        if phase in ("Succeeded", "Failed"):
            break
        assert time.time() < deadline, f"the launcher never finished: {pods}"
        time.sleep(0.2)
    launcher = launchers[0]["metadata"]["name"]
    log = cluster.api.text(f"/api/v1/namespaces/{NAMESPACE}/pods/{launcher}/log")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    return str(phase), log, nodes


def test_an_upstream_shaped_mpijob_cannot_reach_its_workers(cluster: Emulated) -> None:
    ssh = f"ssh -o BatchMode=yes -o ConnectionAttempts=10 {FIRST_HOST} echo reached"
    phase, log, nodes = run(cluster, mpijob("stock", ssh, None))
    assert phase == "Failed"
    assert log.splitlines()[-1] == (
        f"root@stock-worker-0.stock.{NAMESPACE}.svc: Permission denied (publickey,password)."
    )
    assert len(nodes) == 3 and set(nodes) <= {"node-1", "node-2"}  # bound by the scheduler


def test_the_same_job_reaches_both_workers_once_sshd_stops_checking_modes(
    cluster: Emulated,
) -> None:
    relaxed = ["/usr/sbin/sshd", "-De", "-o", "StrictModes=no"]
    phase, log, _ = run(
        cluster, mpijob("relaxed", "mpirun --allow-run-as-root -n 2 hostname", relaxed)
    )
    # ssh cannot record the workers' host keys on the read-only key mount (its stderr, which
    # may interleave with the ranks' output).
    noise = "Failed to add the host to the list of known hosts (/root/.ssh/known_hosts)."
    lines = log.splitlines()
    assert phase == "Succeeded", log
    assert {"relaxed-worker-0", "relaxed-worker-1", noise} <= set(lines), log


def test_a_launcher_with_dns_policy_none_and_no_searches_cannot_resolve_a_worker(
    cluster: Emulated,
) -> None:
    relaxed = ["/usr/sbin/sshd", "-De", "-o", "StrictModes=no"]
    lookup = f"getent hosts {FIRST_HOST}"
    bare = {"dnsPolicy": "None", "dnsConfig": {"nameservers": [marks.GATEWAY]}}
    phase, log, _ = run(cluster, mpijob("bare", lookup, relaxed, **bare))
    assert (phase, log) == ("Failed", "")  # getent: exit 2, not found
    searching = {
        "dnsPolicy": "None",
        "dnsConfig": {
            "nameservers": [marks.GATEWAY],
            "searches": ["svc.cluster.local", "cluster.local"],  # what ci-runner renders
        },
    }
    phase, log, _ = run(cluster, mpijob("searching", lookup, relaxed, **searching))
    assert phase == "Succeeded", log
    assert log.split()[1] == f"searching-worker-0.searching.{NAMESPACE}.svc.cluster.local"
