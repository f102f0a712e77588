"""What Kueue says of a job (kubernetes.local_queue), and ci-runner's words for it.

Kueue makes a Workload of each job in a LocalQueue and keeps the job suspended until its
ClusterQueue reserves quota for every pod; it suspends it again to evict it (a preemption, a
stopped queue, pods not ready in time). The Workload's conditions say which, in Kueue's own
words (sigs.k8s.io/kueue v0.17.0, apis/kueue/v1beta2/workload_types.go: QuotaReserved,
Admitted, Evicted, Preempted; pkg/workload/workload.go sets their messages). The LocalQueue's
``Active`` condition and ``stopPolicy`` say whether anything can be admitted from it at all
(apis/kueue/v1beta2/localqueue_types.go, pkg/controller/core/localqueue_controller.go).

Pure: the tracker hands the objects in; :mod:`queue_check` reads the LocalQueue before submission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ci_runner.backends.kubernetes.podstatus import condition
from ci_runner.backends.kubernetes.resources import JSON
from ci_runner.backends.kubernetes.status_lines import LineKey, StatusLine, Topic
from ci_runner.backends.result import Failure, FailureKind
from ci_runner.clock import duration

# The QuotaReserved=False reason of a workload Kueue cannot consider at all (its LocalQueue or
# ClusterQueue missing, stopped or inactive), as opposed to "Pending" (no quota free yet).
INADMISSIBLE: Final = "Inadmissible"
# A pod asks for a resource the ClusterQueue has no quota of at all: Kueue says so as "Pending",
# but no quota will ever free up (pkg/scheduler/flavorassigner/flavorassigner.go).
_UNCOVERED: Final = re.compile(r"resource (\S+) unavailable in ClusterQueue")
# LocalQueue.spec.stopPolicy values that hold every workload (Hold) or also evict the admitted
# ones (HoldAndDrain); "None" lets them through.
STOPPING_POLICIES: Final = ("Hold", "HoldAndDrain")


@dataclass(frozen=True)
class QueueInfo:
    """The job's LocalQueue as ci-runner saw it before submission: its ClusterQueue, and
    whether ci-runner may read the job's Workload (RBAC) to say why it waits."""

    local_queue: str
    cluster_queue: str | None = None
    visible: bool = True
    timeout: float | None = None  # kubernetes.queue_timeout, seconds


@dataclass(frozen=True)
class Eviction:
    """The Workload's Evicted condition (and its Preempted one, when a preemption caused it)."""

    reason: str
    message: str
    preemption: str | None  # Preempted's reason: InClusterQueue, InCohortReclamation, ...
    since: str  # its lastTransitionTime: a new eviction is a new one


@dataclass(frozen=True)
class WorkloadView:
    """What one Workload says about its job's place in the queue."""

    name: str
    cluster_queue: str | None  # status.admission.clusterQueue, once quota is reserved
    pending_reason: str | None  # QuotaReserved=False: Pending, Inadmissible, ...
    pending_message: str | None  # ... and Kueue's words for it
    eviction: Eviction | None


def read_workload(workload: JSON) -> WorkloadView:
    """The parts of ``workload`` the follower reports."""
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    pending_reason = pending_message = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "QuotaReserved" and cond.get("status") == "False":
            pending_reason = str(cond.get("reason") or "") or None
            pending_message = _one_line(cond.get("message"))
    eviction = None
    evicted = condition(workload, "Evicted")
    if evicted is not None:
        preempted = condition(workload, "Preempted")
        eviction = Eviction(
            reason=str(evicted.get("reason") or ""),
            message=_one_line(evicted.get("message")) or "",
            preemption=str(preempted.get("reason")) if preempted else None,
            since=str(evicted.get("lastTransitionTime") or ""),
        )
    return WorkloadView(
        name=str(workload.get("metadata", {}).get("name", "")),
        cluster_queue=str(admission["clusterQueue"]) if admission.get("clusterQueue") else None,
        pending_reason=pending_reason,
        pending_message=pending_message,
        eviction=eviction,
    )


def local_queue_problem(local_queue: JSON) -> str | None:
    """Why nothing can be admitted from ``local_queue`` (stopped, its ClusterQueue missing or
    inactive), in Kueue's words; None when it admits."""
    name = local_queue.get("metadata", {}).get("name", "")
    stop = (local_queue.get("spec") or {}).get("stopPolicy")
    if stop in STOPPING_POLICIES:
        return f"LocalQueue {name} is stopped (its stopPolicy is {stop})"
    for cond in (local_queue.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active" and cond.get("status") == "False":
            said = _one_line(cond.get("message"))
            reason = cond.get("reason") or "not active"
            return f"LocalQueue {name} is inactive ({reason}{f': {said}' if said else ''})"
    return None


def cluster_queue_of(local_queue: JSON) -> str | None:
    """The ClusterQueue ``local_queue`` sends its workloads to."""
    name = (local_queue.get("spec") or {}).get("clusterQueue")
    return str(name) if name else None


def where(queue: QueueInfo) -> str:
    """``LocalQueue q (ClusterQueue c)``, or without the ClusterQueue when unknown."""
    cq = queue.cluster_queue
    return f"LocalQueue {queue.local_queue}" + (f" (ClusterQueue {cq})" if cq else "")


def queued_line(queue: QueueInfo, reason: str | None, message: str, waited: float) -> StatusLine:
    """The job waits in its queue, and Kueue says why: its ``reason`` and ``message`` (the line
    is said again when either changes)."""
    key = LineKey(Topic.QUEUED, (reason or "", message))
    return StatusLine(key, f"queued in {where(queue)} for {duration(waited)}: {message}")


def position_line(queue: QueueInfo, place: int, pending: int) -> str:
    """Where the job stands among the LocalQueue's pending Workloads (Kueue's visibility API)."""
    return f"queued in {where(queue)}: position {place} of {pending} pending"


def admitted_line(queue: QueueInfo, view: WorkloadView, waited: float) -> str:
    return (
        f"admitted by Kueue: ClusterQueue {view.cluster_queue or queue.cluster_queue} reserved "
        f"quota for Workload {view.name} after {duration(waited)} in LocalQueue "
        f"{queue.local_queue}"
    )


def eviction_line(view: WorkloadView, eviction: Eviction) -> str:
    """Kueue evicted the job (it suspends it): a preemption, a stopped queue, a timeout."""
    cause = eviction.reason + (f", {eviction.preemption}" if eviction.preemption else "")
    text = f"Kueue evicted Workload {view.name} ({cause})"
    return f"{text}: {eviction.message}" if eviction.message else text


def not_visible_line(queue: QueueInfo, namespace: str) -> str:
    return (
        f"cannot read Kueue's LocalQueue {queue.local_queue} or the job's Workload in namespace "
        f"{namespace} (no RBAC right to get localqueues or list workloads in kueue.x-k8s.io): "
        "going on without saying why the job waits; examples/rbac.yaml grants both"
    )


def never_admitted(view: WorkloadView) -> Failure | None:
    """Kueue says it cannot admit the job at all (its queue missing or stopped, a resource its
    ClusterQueue does not cover): waiting would last for ever."""
    said = view.pending_message or view.pending_reason or INADMISSIBLE
    uncovered = _UNCOVERED.search(view.pending_message or "")
    if uncovered is not None:
        fix = (
            f"ask the cluster's admin to add {uncovered.group(1)} to the ClusterQueue's "
            "coveredResources (ci-runner's pods ask for cpu, memory and ephemeral-storage, and "
            "nvidia.com/gpu with resources.gpu), or name another LocalQueue in "
            "kubernetes.local_queue"
        )
    elif view.pending_reason == INADMISSIBLE:
        fix = (
            "name a LocalQueue of the namespace that admits jobs in kubernetes.local_queue "
            "(kubectl get localqueues lists them), or ask the cluster's admin to start this one"
        )
    else:
        return None
    return Failure(
        FailureKind.QUEUED, f"Kueue cannot admit Workload {view.name}: {said}; fix: {fix}"
    )


def queue_timeout_failure(
    queue: QueueInfo, view: WorkloadView | None, waited: float, timeout: float
) -> Failure:
    """The job waited in its queue longer than kubernetes.queue_timeout."""
    said = view.pending_message if view is not None else None
    return Failure(
        FailureKind.QUEUED,
        f"queued in {where(queue)} for {duration(waited)}, longer than kubernetes.queue_timeout "
        f"({duration(timeout)})" + (f": {said}" if said else ""),
    )


def _one_line(text: object) -> str | None:
    lines = str(text or "").strip().splitlines()
    return " ".join(line.strip() for line in lines) or None
