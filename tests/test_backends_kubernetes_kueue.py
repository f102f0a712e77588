"""The follower of a job in Kueue's queue (kubernetes.local_queue): why it waits, in Kueue's words
and only on a change; its admission; an eviction named as Kueue's; kubernetes.queue_timeout; a
queue that admits nothing; the LocalQueue checked before submission."""

from __future__ import annotations

from typing import Any

import pytest

from ci_runner.backends.kubernetes import kueue
from ci_runner.backends.kubernetes.jobkind import Verdict
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.backends.kubernetes.mpijob import MpiJobKind
from ci_runner.backends.kubernetes.resources import MPIJOBS, WORKLOADS
from ci_runner.backends.kubernetes.tracker import JobTracker
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.result import Failure, FailureKind, Outcome

JSON = dict[str, Any]
QUEUE = QueueInfo("team-a", "cluster-total")
LABELS = {"kueue.x-k8s.io/queue-name": "team-a"}
NO_QUOTA = (
    "couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor "
    "default-flavor, 2 more needed"
)
QUEUED_LINE = (
    "queued: MPIJob j is suspended (Kueue LocalQueue team-a); it starts when the queue admits "
    "it (kubernetes.setup_timeout does not run meanwhile)"
)


def job(suspend: bool) -> JSON:
    return {
        "metadata": {"name": "j", "labels": LABELS},
        "spec": {"runPolicy": {"suspend": suspend}, "mpiReplicaSpecs": {"Worker": {"replicas": 2}}},
        "status": {"conditions": [{"type": "Created", "status": "True"}]},
    }


def workload(*conditions: JSON, cluster_queue: str | None = None) -> JSON:
    status: JSON = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue}
    return {"metadata": {"name": "mpijob-j-3c1f5"}, "status": status}


def cond(kind: str, status: str, reason: str, message: str = "", at: str = "t0") -> JSON:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def pending(message: str = NO_QUOTA, reason: str = "Pending") -> JSON:
    return workload(cond("QuotaReserved", "False", reason, message))


ADMITTED = workload(
    cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-total"),
    cond("Admitted", "True", "Admitted", "The workload is admitted"),
    cluster_queue="cluster-total",
)


def tracker(queue: QueueInfo = QUEUE, on_preemption: str = "wait") -> JobTracker:
    return JobTracker(MpiJobKind("j"), 2, 600, on_preemption=on_preemption, queue=queue)  # type: ignore[arg-type]


def waiting(t: JobTracker) -> bool:
    """(Not a property read: mypy would narrow it across the calls between.)"""
    return t.waiting_in_queue


def apply_job(t: JobTracker, suspend: bool, now: float) -> list[str]:
    return t.apply(WatchUpdate(MPIJOBS, "MODIFIED", (job(suspend),)), now)


def apply_workload(t: JobTracker, obj: JSON, now: float, kind: str = "MODIFIED") -> list[str]:
    return t.apply(WatchUpdate(WORKLOADS, kind, (obj,)), now)


def test_the_wait_is_said_in_kueues_words_once_per_change_then_the_admission() -> None:
    t = tracker()
    # Kueue's words say it: not the job's suspension's line.
    assert t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0) == []
    assert apply_workload(t, pending(), 2, "ADDED") == [
        f"queued in LocalQueue team-a (ClusterQueue cluster-total) for 2s: {NO_QUOTA}"
    ]
    assert apply_workload(t, pending(), 30) == []  # the same reason: said once
    assert waiting(t)
    fewer = NO_QUOTA.replace("2 more", "1 more")
    assert apply_workload(t, pending(fewer), 65) == [
        f"queued in LocalQueue team-a (ClusterQueue cluster-total) for 1m5s: {fewer}"
    ]
    assert apply_workload(t, ADMITTED, 90) == [
        "admitted by Kueue: ClusterQueue cluster-total reserved quota for Workload "
        "mpijob-j-3c1f5 after 1m30s in LocalQueue team-a"
    ]
    assert not waiting(t)
    assert apply_job(t, False, 91) == ["resumed: the queue admitted MPIJob j; setting up"]
    assert apply_workload(t, ADMITTED, 92) == []
    assert t.verdict() is None


def test_queue_time_counts_against_queue_timeout_only() -> None:
    t = tracker(QueueInfo("team-a", "cluster-total", timeout=3600))
    t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0)
    apply_workload(t, pending(), 1)
    t.check_time(3599)  # past setup_timeout's and unschedulable_timeout's defaults
    assert t.verdict() is None
    t.check_time(3600)
    assert t.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.QUEUED,
            "queued in LocalQueue team-a (ClusterQueue cluster-total) for 1h, longer than "
            f"kubernetes.queue_timeout (1h): {NO_QUOTA}",
        ),
    )
    assert t.decided_here


def test_without_queue_timeout_the_job_waits_for_the_ci_jobs_own_limit() -> None:
    t = tracker()
    t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0)
    apply_workload(t, pending(), 1)
    t.check_time(10 * 86400)
    assert t.verdict() is None


def test_a_queue_that_admits_nothing_ends_the_run_at_once() -> None:
    t = tracker()
    t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0)
    apply_workload(t, pending("LocalQueue team-a is inactive", "Inadmissible"), 3)
    assert t.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.QUEUED,
            "Kueue cannot admit Workload mpijob-j-3c1f5: LocalQueue team-a is inactive; fix: "
            "name a LocalQueue of the namespace that admits jobs in kubernetes.local_queue "
            "(kubectl get localqueues lists them), or ask the cluster's admin to start this one",
        ),
    )


def test_a_resource_the_cluster_queue_does_not_cover_ends_the_run_at_once() -> None:
    # Kueue v0.17.0's words for a ClusterQueue without ephemeral-storage, seen on the emulated
    # cluster: "Pending", though no quota will ever free up.
    t = tracker()
    t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0)
    uncovered = (
        "couldn't assign flavors to pod set launcher: resource ephemeral-storage unavailable "
        "in ClusterQueue"
    )
    assert apply_workload(t, pending(uncovered), 1) == []
    assert t.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.QUEUED,
            f"Kueue cannot admit Workload mpijob-j-3c1f5: {uncovered}; fix: ask the cluster's "
            "admin to add ephemeral-storage to the ClusterQueue's coveredResources (ci-runner's "
            "pods ask for cpu, memory and ephemeral-storage, and nvidia.com/gpu with "
            "resources.gpu), or name another LocalQueue in kubernetes.local_queue",
        ),
    )


PREEMPTION = "Preempted to accommodate a workload (UID: 1f0e, JobUID: 77ab) due to prioritization"


def _evicted(at: str = "t1") -> JSON:
    return workload(
        cond("QuotaReserved", "False", "Pending", "Preempted", at),
        cond("Evicted", "True", "Preempted", PREEMPTION, at),
        cond("Preempted", "True", "InClusterQueue", PREEMPTION, at),
    )


@pytest.mark.parametrize("on_preemption", ["wait", "fail"])
def test_an_eviction_is_named_as_kueues_then_on_preemption_decides(on_preemption: str) -> None:
    t = tracker(on_preemption=on_preemption)
    t.apply(WatchUpdate(MPIJOBS, SYNC, (job(False),)), 0)
    apply_workload(t, ADMITTED, 0)
    t.state.preempted = True  # it had started: its launcher ran
    evicted = f"Kueue evicted Workload mpijob-j-3c1f5 (Preempted, InClusterQueue): {PREEMPTION}"
    assert apply_workload(t, _evicted(), 50) == [evicted]
    assert apply_workload(t, _evicted(), 51) == []
    # Kueue's first update after the eviction still shows the admission it takes back.
    still = _evicted()
    still["status"]["admission"] = {"clusterQueue": "cluster-total"}
    assert apply_workload(t, still, 51) == []
    lines = apply_job(t, True, 52)
    if on_preemption == "fail":
        assert lines == []
        verdict = t.verdict()
        assert verdict is not None and verdict.failure is not None
        assert verdict.failure.kind is FailureKind.PREEMPTED
    else:
        assert lines[0].startswith("preempted: MPIJob j was suspended after it started")
        assert t.verdict() is None
        # Requeued, its Evicted condition still there: why it waits again, then its readmission.
        requeued = _evicted()
        requeued["status"]["conditions"][0]["message"] = NO_QUOTA
        assert apply_workload(t, requeued, 60) == [
            f"queued in LocalQueue team-a (ClusterQueue cluster-total) for 8s: {NO_QUOTA}"
        ]
        assert apply_workload(t, ADMITTED, 70)[0].startswith("admitted by Kueue: ")


def test_without_the_right_to_read_the_workload_a_suspended_job_counts_as_queued() -> None:
    t = tracker(QueueInfo("team-a", visible=False))
    assert t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0) == [QUEUED_LINE]
    assert waiting(t)
    apply_job(t, False, 5)
    assert not waiting(t)


@pytest.mark.parametrize(
    ("local_queue", "expected"),
    [
        ({"metadata": {"name": "q"}, "spec": {"clusterQueue": "c", "stopPolicy": "None"}}, None),
        (
            {"metadata": {"name": "q"}, "spec": {"stopPolicy": "HoldAndDrain"}},
            "LocalQueue q is stopped (its stopPolicy is HoldAndDrain)",
        ),
        (
            {
                "metadata": {"name": "q"},
                "status": {
                    "conditions": [
                        cond(
                            "Active",
                            "False",
                            "ClusterQueueDoesNotExist",
                            "Can't submit new workloads to clusterQueue",
                        )
                    ]
                },
            },
            "LocalQueue q is inactive (ClusterQueueDoesNotExist: Can't submit new workloads to "
            "clusterQueue)",
        ),
    ],
)
def test_a_local_queue_that_admits_nothing_says_why(local_queue: JSON, expected: str) -> None:
    assert kueue.local_queue_problem(local_queue) == expected


def test_an_admission_seen_before_the_suspended_job_is_said_once() -> None:
    t = tracker()
    assert apply_workload(t, ADMITTED, 0, "ADDED") == [
        "admitted by Kueue: ClusterQueue cluster-total reserved quota for Workload "
        "mpijob-j-3c1f5 after 0s in LocalQueue team-a"
    ]
    assert t.apply(WatchUpdate(MPIJOBS, SYNC, (job(True),)), 0) == []
    assert apply_workload(t, ADMITTED, 1) == []
    assert apply_job(t, False, 1) == ["resumed: the queue admitted MPIJob j; setting up"]
