"""Why a job failed, from what the cluster shows: pure functions over MPIJob, Pod, Event dicts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from ci_runner.backends.kubernetes.resources import JOB_ROLE_LABEL, JSON
from ci_runner.backends.result import Failure, FailureKind

IMAGE_PULL_REASONS: Final = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def role(pod: JSON) -> str:
    """``launcher`` or ``worker`` (from the MPI Operator's labels)."""
    return str(pod.get("metadata", {}).get("labels", {}).get(JOB_ROLE_LABEL, ""))


def pod_name(pod: JSON) -> str:
    return str(pod.get("metadata", {}).get("name", ""))


def condition(obj: JSON, kind: str) -> JSON | None:
    """The status condition of type ``kind`` when its status is True."""
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def container_states(pod: JSON) -> list[JSON]:
    statuses = pod.get("status", {})
    every = [
        *(statuses.get("initContainerStatuses") or []),
        *(statuses.get("containerStatuses") or []),
    ]
    return [dict(status) for status in every]


def terminated(pod: JSON) -> JSON | None:
    """The first container termination that was a failure (or else the first at all)."""
    ended = [
        s["state"]["terminated"]
        for s in container_states(pod)
        if "terminated" in s.get("state", {})
    ]
    failed = [t for t in ended if t.get("exitCode", 0) != 0]
    return dict((failed or ended)[0]) if (failed or ended) else None


def memory_limit(pod: JSON) -> str | None:
    for container in pod.get("spec", {}).get("containers", []):
        limit = container.get("resources", {}).get("limits", {}).get("memory")
        if limit:
            return str(limit)
    return None


def image_pull_failure(pod: JSON) -> Failure | None:
    """ErrImagePull / ImagePullBackOff on any container of the pod."""
    for status in container_states(pod):
        waiting = status.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            detail = waiting.get("message") or waiting["reason"]
            return Failure(
                FailureKind.IMAGE_PULL,
                f"pod {pod_name(pod)} cannot pull image {status.get('image', '?')} "
                f"({waiting['reason']}): {detail}",
                pod=pod_name(pod),
            )
    return None


def unschedulable_message(pod: JSON) -> str | None:
    """The scheduler's reason when the pod cannot be placed on any node."""
    for cond in pod.get("status", {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message") or "no node fits the pod")
    return None


def validation_failure(events: Iterable[JSON]) -> Failure | None:
    """MPI Operator's ValidationError Event: the job will never start."""
    for event in events:
        if event.get("reason") == "ValidationError":
            return Failure(
                FailureKind.VALIDATION,
                f"MPI Operator rejected the MPIJob: {event.get('message', '')}",
            )
    return None


def explain_failed_job(mpijob: JSON, pods: Mapping[str, JSON]) -> Failure:
    """Why a job whose Failed condition is True failed, the root cause first.

    A worker's OOMKilled or crash shows up only as the launcher failing (MPI Operator #90), so
    workers are looked at before the launcher's exit code.
    """
    failed = condition(mpijob, "Failed") or {}
    reason = str(failed.get("reason", ""))
    workers = sorted((p for p in pods.values() if role(p) == "worker"), key=pod_name)
    launchers = sorted((p for p in pods.values() if role(p) == "launcher"), key=pod_name)
    for pod in [*workers, *launchers]:
        end = terminated(pod)
        if end and end.get("reason") == "OOMKilled":
            limit = memory_limit(pod)
            suffix = f" (memory limit {limit})" if limit else ""
            return Failure(
                FailureKind.OOM_KILLED,
                f"{role(pod)} {pod_name(pod)} was OOMKilled{suffix}",
                exit_code=end.get("exitCode"),
                pod=pod_name(pod),
            )
    if reason.startswith("DeadlineExceeded"):
        deadline = mpijob.get("spec", {}).get("runPolicy", {}).get("activeDeadlineSeconds")
        limit = f" of {deadline}s" if deadline else ""
        return Failure(
            FailureKind.DEADLINE,
            f"the job ran past its time limit{limit} (activeDeadlineSeconds) and was stopped",
        )
    for pod in workers:
        end = terminated(pod)
        if end and end.get("exitCode", 0) != 0:
            return Failure(
                FailureKind.WORKER_FAILED,
                f"worker {pod_name(pod)} exited with code {end['exitCode']}",
                exit_code=end["exitCode"],
                pod=pod_name(pod),
            )
    for pod in reversed(launchers):
        end = terminated(pod)
        if end and end.get("exitCode", 0) != 0:
            return Failure(
                FailureKind.EXIT_CODE,
                f"launcher {pod_name(pod)} exited with code {end['exitCode']}",
                exit_code=end["exitCode"],
                pod=pod_name(pod),
            )
    message = failed.get("message") or "no reason given"
    return Failure(FailureKind.UNKNOWN, f"MPIJob failed: {reason or 'Failed'}: {message}")
