"""What a pod's or an MPIJob's status says, as yes/no and plain values: pure functions over
the API's dicts.

Every check of a pod's status (running, Ready, ended, a container started, scheduled) is here;
the tracker, the launcher-log stream and the failure texts (:mod:`explain`) ask.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Final

from ci_runner.backends.kubernetes.resources import JOB_ROLE_LABEL, JSON

IMAGE_PULL_REASONS: Final = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
)
# Pull failures no retry by the kubelet can mend (kuberuntime: the name cannot be parsed, or the
# pull policy forbids pulling); ErrImagePull and ImagePullBackOff are retried with back-off.
PERMANENT_PULL_REASONS: Final = ("InvalidImageName", "ErrImageNeverPull")


class Role(Enum):
    """What a pod of the job is for (MPIJob's are labelled with it: :func:`role`)."""

    LAUNCHER = "launcher"  # its log is the job's log, and its end the job's
    WORKER = "worker"  # runs ranks; must be Ready before the launcher starts


def role(pod: JSON) -> Role | None:
    """The launcher or a worker, from the MPI Operator's label; None without it."""
    label = str(pod.get("metadata", {}).get("labels", {}).get(JOB_ROLE_LABEL, ""))
    return next((r for r in Role if r.value == label), None)


def pod_name(pod: JSON) -> str:
    return str(pod.get("metadata", {}).get("name", ""))


def condition(obj: JSON, kind: str) -> JSON | None:
    """The status condition of type ``kind`` when its status is True."""
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def is_ready(pod: JSON) -> bool:
    """The pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def is_running(pod: JSON) -> bool:
    """Running, every container too, and not being deleted."""
    states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
    return (
        pod.get("status", {}).get("phase") == "Running"
        and not pod.get("metadata", {}).get("deletionTimestamp")
        and bool(states)
        and all("running" in state for state in states)
    )


def has_ended(pod: JSON) -> bool:
    """The pod's phase is Succeeded or Failed."""
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def container_started(pod: JSON) -> bool:
    """A (main) container of the pod runs or has run."""
    states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
    return any("running" in s or "terminated" in s for s in states)


def containers_ended(pod: JSON, container: str | None = None) -> bool:
    """The pod has ended, or every (main) container of it (``container`` alone, when named)
    has terminated: its log is complete."""
    if has_ended(pod):
        return True
    states = [
        c.get("state", {})
        for c in pod.get("status", {}).get("containerStatuses") or []
        if container is None or c.get("name") == container
    ]
    return bool(states) and all("terminated" in state for state in states)


def held_by_sidecars(pod: JSON, container: str) -> tuple[JSON, list[str]] | None:
    """How ``container`` ended and the pod's other (main) containers still running, when they
    alone keep the pod from ending: sidecars injected as plain containers (a service mesh's
    proxy) never exit, so the pod, and the Job that owns it, never see it end."""
    if has_ended(pod) or pod.get("metadata", {}).get("deletionTimestamp"):
        return None
    end: JSON | None = None
    running = []
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = status.get("state", {})
        if status.get("name") == container:
            end = state.get("terminated")
        elif "running" in state:
            running.append(str(status.get("name", "")))
    return (dict(end), sorted(running)) if end is not None and running else None


def statuses(pod: JSON) -> Iterator[tuple[str, JSON]]:
    """("init container" | "container", status) for each container, init containers first."""
    status = pod.get("status", {})
    for container in status.get("initContainerStatuses") or []:
        yield "init container", container
    for container in status.get("containerStatuses") or []:
        yield "container", container


def container_states(pod: JSON) -> list[JSON]:
    """Every container's status, init containers first."""
    return [dict(status) for _, status in statuses(pod)]


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


def container_spec(pod: JSON, name: str) -> JSON:
    """The spec of the (init) container ``name``; {} when the pod has none of that name."""
    spec = pod.get("spec", {})
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if container.get("name") == name:
            return dict(container)
    return {}


def image_pull_reason(pod: JSON) -> str | None:
    """The first pull-error waiting reason among the pod's containers."""
    for status in container_states(pod):
        reason = (status.get("state", {}).get("waiting") or {}).get("reason")
        if reason in IMAGE_PULL_REASONS:
            return str(reason)
    return None


def is_suspended(mpijob: JSON) -> bool:
    """``runPolicy.suspend`` when the spec sets it (a queue such as Kueue creates the job
    suspended and resumes it on admission), else the operator's Suspended condition."""
    suspend = mpijob.get("spec", {}).get("runPolicy", {}).get("suspend")
    if isinstance(suspend, bool):
        return suspend
    return condition(mpijob, "Suspended") is not None


def resume_stalled(mpijob: JSON) -> bool:
    """The queue resumed the job (``runPolicy.suspend`` false) but MPI Operator's Suspended
    condition is still True: the operator's sync stops before it updates the status, as v0.8.2's
    does when it cannot clear the launcher Job's status.startTime through jobs/status
    (mpi_job_controller.go, the UpdateStatus before it unsuspends the launcher Job)."""
    suspend = mpijob.get("spec", {}).get("runPolicy", {}).get("suspend")
    return suspend is False and condition(mpijob, "Suspended") is not None


def is_scheduled(pod: JSON) -> bool:
    """The pod has a node: it never becomes unschedulable again."""
    if pod.get("spec", {}).get("nodeName"):
        return True
    if pod.get("status", {}).get("phase") not in (None, "", "Pending"):
        return True
    return condition(pod, "PodScheduled") is not None


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
