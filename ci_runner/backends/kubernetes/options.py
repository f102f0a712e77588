"""What one run of the Kubernetes backend is built from: :class:`JobOptions`, made from the plan
(:func:`job_options`) at the edge, ``ci-runner train``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.connect import Connection
from ci_runner.backends.kubernetes.kinds import JOB, MPIJOB, followed_container
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.config.types import KubernetesOptions, OnPreemption
from ci_runner.http_policy import RetryPolicy
from ci_runner.plan.run_plan import JobSecret, RunPlan
from ci_runner.render import CODE_DIR, pod_deadlines


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
    # A batch/v1 Job's headless Service (its nodes' names, node 0's rendezvous): created after
    # the Job and owned by it, like the Secret and the ConfigMap.
    service: Mapping[str, Any] | None = None
    # A Job's: torchrun's processes a node (a failing rank's node) and the checkout in each pod
    # (where the rank's code raised, relative to it).
    ranks_per_node: int = 0
    code_dir: str = ""
    # kubernetes.local_queue: Kueue's LocalQueue, as checked before submission.
    queue: QueueInfo | None = None


def job_options(
    plan: RunPlan,
    connection: Connection,
    manifest: Mapping[str, Any],
    scripts: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None = None,
    queue: QueueInfo | None = None,
) -> JobOptions:
    """The options of ``plan``'s job, rendered as ``manifest`` (an MPIJob or a batch/v1 Job;
    ``scripts``, and a Job's headless ``service``), on the cluster of ``connection``;
    ``queue``: its LocalQueue as :mod:`queue_check` found it."""
    k8s = plan.config.kubernetes
    # An MPIJob worker's own deadline, and each torchrun node's (torchrun_job.job_deadline).
    worker_deadline = pod_deadlines(plan.deadline_seconds, plan.config)["worker"]
    return JobOptions(
        api_client=connection.client,
        namespace=connection.namespace,
        manifest=manifest,
        secret=plan.secret,
        mpijob_name=plan.mpijob_name,
        workers=plan.config.workers,
        launcher_container=followed_container(manifest),
        unschedulable_timeout=k8s.unschedulable_timeout,
        setup_timeout=k8s.setup_timeout,
        keep_finished=k8s.keep_finished,
        on_preemption=k8s.on_preemption,
        lifetime=pods_lifetime(k8s.unschedulable_timeout, worker_deadline),
        scripts=scripts,
        service=service,
        ranks_per_node=plan.config.slots_per_worker,
        code_dir=CODE_DIR,
        queue=queue,
    )


def rendered_parts(
    objects: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """The job object, its pod scripts' ConfigMap and its Service (a batch/v1 Job's) out of
    what render_objects returns (its Secret, masked, is made by submit from the plan)."""
    job = next(dict(o) for o in objects if o.get("kind") in (MPIJOB, JOB))
    scripts = next((dict(o) for o in objects if o.get("kind") == "ConfigMap"), None)
    service = next((dict(o) for o in objects if o.get("kind") == "Service"), None)
    return job, scripts, service


def pods_lifetime(unschedulable_timeout: float, worker_deadline: float | None) -> float | None:
    """Seconds from submission the job's pods can run at most: a worker waits at most
    ``unschedulable_timeout`` for a node, then runs at most its own ``activeDeadlineSeconds``,
    ``worker_deadline`` (None: no limit)."""
    return None if worker_deadline is None else unschedulable_timeout + worker_deadline
