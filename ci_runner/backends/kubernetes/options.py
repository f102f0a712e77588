"""What one run of the Kubernetes backend is built from: :class:`JobOptions`, made from the plan
(:func:`job_options`) at the edge, ``ci-runner train``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.connect import Connection
from ci_runner.config.types import KubernetesOptions, OnPreemption
from ci_runner.http_policy import RetryPolicy
from ci_runner.plan.run_plan import JobSecret, RunPlan
from ci_runner.render import pod_deadlines


@dataclass(frozen=True)
class JobOptions:
    """The cluster, the job as rendered, and train.yaml's ``kubernetes`` settings."""

    api_client: ApiClient
    namespace: str
    manifest: Mapping[str, Any]  # the MPIJob, submitted as it is
    secret: JobSecret
    mpijob_name: str
    workers: int
    # Named in every log request: a sidecar injected into the pod makes it one of several.
    launcher_container: str
    unschedulable_timeout: float
    setup_timeout: float = KubernetesOptions.setup_timeout
    keep_finished: float = 0
    on_preemption: OnPreemption = KubernetesOptions.on_preemption
    # Seconds from submission the job's pods can run at most: a worker's own deadline once it
    # has started, after at most unschedulable_timeout waiting for a node (render.pod_deadlines).
    # None: no limit (the job is not marked to be deleted after it).
    lifetime: float | None = None
    scripts: Mapping[str, Any] | None = None  # the pod scripts' ConfigMap
    retry: RetryPolicy | None = None


def job_options(
    plan: RunPlan,
    connection: Connection,
    manifest: Mapping[str, Any],
    scripts: Mapping[str, Any] | None,
) -> JobOptions:
    """The options of ``plan``'s job, rendered as ``manifest`` (and ``scripts``), on the cluster
    of ``connection``."""
    k8s = plan.config.kubernetes
    worker_deadline = pod_deadlines(plan.deadline_seconds, plan.config)["worker"]
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return JobOptions(
        api_client=connection.client,
        namespace=connection.namespace,
        manifest=manifest,
        secret=plan.secret,
        mpijob_name=plan.mpijob_name,
        workers=plan.config.workers,
        launcher_container=str(launcher["containers"][0]["name"]),
        unschedulable_timeout=k8s.unschedulable_timeout,
        setup_timeout=k8s.setup_timeout,
        keep_finished=k8s.keep_finished,
        on_preemption=k8s.on_preemption,
        lifetime=pods_lifetime(k8s.unschedulable_timeout, worker_deadline),
        scripts=scripts,
    )


def pods_lifetime(unschedulable_timeout: float, worker_deadline: float | None) -> float | None:
    """Seconds from submission the job's pods can run at most: a worker waits at most
    ``unschedulable_timeout`` for a node, then runs at most its own ``activeDeadlineSeconds``,
    ``worker_deadline`` (None: no limit)."""
    return None if worker_deadline is None else unschedulable_timeout + worker_deadline
