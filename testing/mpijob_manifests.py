"""Small v2beta1 MPIJobs shaped like the ones ci-runner renders, for tests of the Kubernetes
backend (on the scripted cluster, the real nodes with busybox for the image, and the in-process
fake API server), and their names."""

from __future__ import annotations

from typing import Any

from ci_runner.backends.kubernetes.options import pods_lifetime

JSON = dict[str, Any]
NAMESPACE = "ml"
JOB = "train-3f2a9c1"
IMAGE = "registry.example.com/ml/train:3f2a9c1"
GIT_TOKEN = "glcbt-64-secret-job-token"


def mpijob_manifest(
    name: str = JOB,
    workers: int = 2,
    deadline: int | None = None,
    launcher_replicas: int = 1,
    clean_pod_policy: str = "Running",
    wait_for_workers: bool = False,
    backoff_limit: int = 0,
    ttl: int | None = None,
    setup: bool = False,
) -> JSON:
    """A small v2beta1 MPIJob like the one ci-runner renders (launcher + workers).

    ``wait_for_workers``: launcherCreationPolicy WaitForWorkersReady (ci-runner's); ``setup``:
    the workers' init containers (fetch-code, install-requirements) as ci-runner renders them.
    """
    run_policy: JSON = {"cleanPodPolicy": clean_pod_policy, "backoffLimit": backoff_limit}
    if deadline is not None:
        run_policy["activeDeadlineSeconds"] = deadline
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    env = [
        {
            "name": "GIT_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": f"{name}-secrets", "key": "git-token"}},
        }
    ]
    launcher: JSON = {
        "name": "launcher",
        "image": IMAGE,
        "command": ["horovodrun", "-np", str(workers), "python", "train.py"],
        "env": env,
    }
    worker: JSON = {
        "name": "worker",
        "image": IMAGE,
        "resources": {"limits": {"memory": "4Gi", "nvidia.com/gpu": 1}},
        "env": env,
    }
    launcher_pod: JSON = {"containers": [launcher]}
    worker_pod: JSON = {"containers": [worker]}
    if setup:
        worker_pod["initContainers"] = [
            {"name": "fetch-code", "image": IMAGE, "command": ["/bin/sh", "-c", "git clone"]},
            {
                "name": "install-requirements",
                "image": IMAGE,
                "command": ["/bin/sh", "-c", "pip install -r requirements.txt"],
                "resources": {"limits": {"memory": "4Gi"}},
            },
        ]
    spec: JSON = {
        "slotsPerWorker": 1,
        "mpiImplementation": "OpenMPI",
        "runPolicy": run_policy,
        "mpiReplicaSpecs": {
            "Launcher": {
                "replicas": launcher_replicas,
                "restartPolicy": "Never",
                "template": {"spec": launcher_pod},
            },
            "Worker": {
                "replicas": workers,
                "restartPolicy": "Never",
                "template": {"spec": worker_pod},
            },
        },
    }
    if wait_for_workers:
        spec["launcherCreationPolicy"] = "WaitForWorkersReady"
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "ci-runner"}},
        "spec": spec,
    }


def plan_facts(manifest: JSON, unschedulable_timeout: float) -> JSON:
    """What ``ci-runner train`` takes from the plan for the backend's options
    (:func:`~ci_runner.backends.kubernetes.options.job_options`), as ``manifest`` says it: the
    job's name, its worker count, the launcher's container and the pods' lifetime."""
    specs = manifest["spec"]["mpiReplicaSpecs"]
    worker = specs.get("Worker", {})
    deadline = worker.get("template", {}).get("spec", {}).get("activeDeadlineSeconds")
    return {
        "mpijob_name": str(manifest["metadata"]["name"]),
        "workers": int(worker.get("replicas", 1)),
        "launcher_container": str(specs["Launcher"]["template"]["spec"]["containers"][0]["name"]),
        "lifetime": pods_lifetime(
            unschedulable_timeout, None if deadline is None else float(deadline)
        ),
    }
