"""Small batch/v1 Indexed Jobs shaped as ci-runner renders them for ``distributed: torchrun``
(the contract between the parts of issue 44: completionMode Indexed, completions = parallelism =
nodes, backoffLimitPerIndex 0, maxFailedIndexes 0, podReplacementPolicy Failed, the pods' subdomain
the Job's name, a main container named ``torchrun``), their headless Service, and the nodes' side
of one such Job on the scripted cluster (:class:`IndexedJobScenario`): the test plays each node's
kubelet on the pods the real Job controller created."""

from __future__ import annotations

from typing import Any

from ci_runner.backends.kubernetes.options import pods_lifetime
from testing.kube_api import Api
from testing.mpijob_manifests import IMAGE, JOB
from testing.scripted_cluster.kubelet import ScriptedKubelet
from testing.waiting import wait_for

JSON = dict[str, Any]
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
# The Job controller's pod labels (k8s.io/api v0.35.4 batch/v1/types.go).
JOB_NAME = "batch.kubernetes.io/job-name"
INDEX = "batch.kubernetes.io/job-completion-index"
CONTAINER = "torchrun"
PORT = 29500


def labels(name: str) -> JSON:
    return {"app.kubernetes.io/managed-by": "ci-runner", "ci-runner/job": name}


def indexed_job_manifest(
    name: str = JOB,
    nodes: int = 2,
    deadline: int | None = None,
    setup: bool = False,
    pod_deadline: int | None = None,
) -> JSON:
    """A small Indexed Job like the one ci-runner renders for torchrun: ``nodes`` pods, each
    running torchrun (``setup``: the fetch-code and install-requirements init containers)."""
    env = [
        {
            "name": "GIT_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": f"{name}-secrets", "key": "git-token"}},
        },
        {"name": "CI_RUNNER_JOB", "value": name},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    torchrun: JSON = {
        "name": CONTAINER,
        "image": IMAGE,
        "command": ["/bin/sh", "/ci-runner-scripts/torchrun.sh", "--nnodes", str(nodes)],
        "args": ["--", "python", "train.py"],
        "env": env,
        "resources": {"limits": {"memory": "4Gi"}},
    }
    pod: JSON = {
        "subdomain": name,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [torchrun],
    }
    if setup:
        pod["initContainers"] = [
            {"name": "fetch-code", "image": IMAGE, "command": ["/bin/sh", "-c", "git clone"]},
            {
                "name": "install-requirements",
                "image": IMAGE,
                "command": ["/bin/sh", "-c", "pip install -r requirements.txt"],
            },
        ]
    if pod_deadline is not None:
        pod["activeDeadlineSeconds"] = pod_deadline
    spec: JSON = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimitPerIndex": 0,
        "maxFailedIndexes": 0,
        "podReplacementPolicy": "Failed",
        "template": {"metadata": {"labels": labels(name)}, "spec": pod},
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels(name)},
        "spec": spec,
    }


def service_manifest(name: str = JOB) -> JSON:
    """The Job's headless Service: its pods' names (``<job>-<index>.<job>``), node 0's port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels(name)},
        "spec": {
            "clusterIP": "None",
            "selector": {"ci-runner/job": name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "c10d", "port": PORT, "protocol": "TCP"}],
        },
    }


def job_facts(manifest: JSON, unschedulable_timeout: float) -> JSON:
    """What ``ci-runner train`` takes from the plan for the backend's options, as an Indexed
    Job's ``manifest`` says it (testing.mpijob_manifests.plan_facts' twin)."""
    pod = manifest["spec"]["template"]["spec"]
    deadline = pod.get("activeDeadlineSeconds")
    return {
        "mpijob_name": str(manifest["metadata"]["name"]),
        "workers": int(manifest["spec"]["completions"]),
        "launcher_container": str(pod["containers"][0]["name"]),
        "lifetime": pods_lifetime(
            unschedulable_timeout, None if deadline is None else float(deadline)
        ),
    }


class IndexedJobScenario:
    """The nodes' side of one Indexed Job, step by step."""

    def __init__(self, admin: Api, kubelet: ScriptedKubelet, name: str, namespace: str) -> None:
        self.admin = admin
        self.kubelet = kubelet
        self.name = name
        self.namespace = namespace

    @property
    def submitted(self) -> str:
        return f"[ci-runner] submitted Job {self.name} in namespace {self.namespace}"

    @property
    def job(self) -> JSON | None:
        return self.admin.get(JOBS.format(ns=self.namespace) + f"/{self.name}")

    def listed(self) -> list[JSON]:
        """The Job's pods as the API lists them."""
        pods, _ = self.admin.list(
            f"/api/v1/namespaces/{self.namespace}/pods",
            {"labelSelector": f"{JOB_NAME}={self.name}"},
        )
        return list(pods)

    def pod(self, index: int) -> str:
        """The name of node ``index``'s pod, once the Job controller made it."""

        def probe() -> str | None:
            names = [
                str(p["metadata"]["name"])
                for p in self.listed()
                if p["metadata"].get("labels", {}).get(INDEX) == str(index)
            ]
            return names[0] if names else None

        return wait_for(f"node {index} of {self.name}", probe)

    def nodes(self) -> int:
        job = self.job
        assert job is not None, f"Job {self.name} is gone"
        return int(job["spec"]["completions"])

    def nodes_running(self) -> None:
        """Every node's containers start (init containers done): torchrun runs."""
        for index in range(self.nodes()):
            self.kubelet.run(self.namespace, self.pod(index))

    def node_log(self, index: int, *lines: str) -> None:
        self.kubelet.log(self.namespace, self.pod(index), CONTAINER, lines)

    def node_exits(self, index: int, code: int, reason: str | None = None) -> None:
        self.kubelet.exits(self.namespace, self.pod(index), CONTAINER, code, reason)

    def node_init_fails(self, index: int, container: str, code: int, *lines: str) -> None:
        """An init container of node ``index`` logs ``lines`` (stderr) and exits ``code``."""
        pod = self.pod(index)
        self.kubelet.init_running(self.namespace, pod, container)
        if lines:
            self.kubelet.log(self.namespace, pod, container, lines, stream="stderr")
        self.kubelet.init_fails(self.namespace, pod, container, code)
