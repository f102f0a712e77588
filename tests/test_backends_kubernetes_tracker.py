"""JobTracker on an MPIJob: each phase printed once; the end from conditions, not counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ci_runner.backends.kubernetes.jobkind import EventNews, JobKind, Verdict
from ci_runner.backends.kubernetes.mpijob import MpiJobKind
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import EVENTS, MPIJOBS, PODS, Resource
from ci_runner.backends.kubernetes.tracker import JobTracker
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.result import Failure, FailureKind, Outcome

JSON = dict[str, Any]
ROLE = "training.kubeflow.org/job-role"


def worker(index: int, ready: bool = False, unschedulable: str | None = None) -> JSON:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        ]
    status: JSON = {"phase": "Running" if ready else "Pending", "conditions": conditions}
    if ready:
        status["containerStatuses"] = [{"state": {"running": {}}}]
    return {"metadata": {"name": f"j-worker-{index}", "labels": {ROLE: "worker"}}, "status": status}


def launcher(name: str = "j-launcher-b2c4d", exit_code: int | None = None) -> JSON:
    """A launcher pod whose container runs (or has exited with ``exit_code``)."""
    state: JSON
    if exit_code is None:
        phase, state = "Running", {"running": {}}
    else:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        state = {"terminated": {"exitCode": exit_code}}
    return {
        "metadata": {"name": name, "labels": {ROLE: "launcher"}},
        "status": {"phase": phase, "containerStatuses": [{"state": state}]},
    }


def mpijob(*conditions: tuple[str, str]) -> JSON:
    return {
        "metadata": {"name": "j"},
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}},
        "status": {
            "conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions],
            "replicaStatuses": {"Launcher": {"failed": 1}},
        },
    }


def pods(kind: str, *objects: JSON) -> WatchUpdate:
    return WatchUpdate(PODS, kind, objects)


def test_ready_count_is_printed_as_it_grows_only() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    assert tracker.apply(pods(SYNC, worker(0), worker(1)), 0) == []
    assert tracker.apply(pods("MODIFIED", worker(0, ready=True)), 0) == ["workers ready 1/2"]
    assert tracker.apply(pods("MODIFIED", worker(0, ready=True)), 0) == []
    assert tracker.apply(pods("MODIFIED", worker(1, ready=True)), 0) == ["workers ready 2/2"]
    assert tracker.apply(pods("DELETED", worker(1, ready=True)), 0) == []


def test_pending_reason_is_printed_once_and_times_out() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    update = pods(SYNC, worker(0, unschedulable="no GPU"), worker(1, unschedulable="no GPU"))
    assert tracker.apply(update, 10) == ["workers pending: no GPU"]
    event = {
        "involvedObject": {"kind": "Pod", "name": "j-worker-0"},
        "reason": "FailedScheduling",
        "message": "no GPU",
    }
    assert tracker.apply(WatchUpdate(EVENTS, "ADDED", (event,)), 20) == []
    tracker.check_time(609)
    assert tracker.verdict() is None
    tracker.check_time(610)
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.UNSCHEDULABLE,
            "pod j-worker-0 stayed unschedulable for 600s: no GPU",
            pod="j-worker-0",
        ),
    )
    assert tracker.decided_here


def test_scheduled_again_resets_the_timer() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600, setup_timeout=10_000)
    tracker.apply(pods(SYNC, worker(0, unschedulable="no GPU")), 0)
    tracker.apply(pods("MODIFIED", worker(0, ready=True)), 500)
    tracker.check_time(5000)
    assert tracker.verdict() is None


def test_the_end_comes_from_conditions_not_counters() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    assert tracker.verdict() is None  # replicaStatuses.Launcher.failed is 1: not the end
    done = mpijob(("Created", "MPIJobCreated"), ("Succeeded", "MPIJobSucceeded"))
    tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (done,)), 0)
    assert tracker.verdict() == Verdict(Outcome.SUCCEEDED)
    assert not tracker.decided_here


def test_the_launcher_pod_succeeded_is_the_end_before_the_operator_says_so() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.verdict() is None
    tracker.apply(pods("MODIFIED", launcher(exit_code=1)), 1)
    assert tracker.verdict() is None  # the Job may start another launcher: its condition decides
    tracker.apply(pods("MODIFIED", launcher("j-launcher-x7k2p")), 2)
    tracker.apply(pods("MODIFIED", launcher("j-launcher-x7k2p", exit_code=0)), 3)
    assert tracker.verdict() == Verdict(Outcome.SUCCEEDED)
    assert not tracker.decided_here


def test_a_kept_job_ends_with_the_operator_s_condition_not_the_launcher_pod() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, launcher_decides=False)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    tracker.apply(pods("MODIFIED", launcher(exit_code=0)), 1)
    assert tracker.verdict() is None
    done = mpijob(("Created", "MPIJobCreated"), ("Succeeded", "MPIJobSucceeded"))
    tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (done,)), 2)
    assert tracker.verdict() == Verdict(Outcome.SUCCEEDED)


def test_validation_error_fails_at_once() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    event = {
        "involvedObject": {"kind": "MPIJob", "name": "j"},
        "reason": "ValidationError",
        "message": "Found validation errors: bad",
    }
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (event,)), 0) == []
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.VALIDATION, "MPI Operator rejected the MPIJob: Found validation errors: bad"
        ),
    )


def test_a_deleted_job_is_cancelled() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(WatchUpdate(MPIJOBS, "DELETED", (mpijob(),)), 0)
    assert tracker.verdict() == Verdict(
        Outcome.CANCELLED, Failure(FailureKind.CANCELLED, "MPIJob j was deleted before it finished")
    )


def test_launcher_running_once_per_pod() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600)
    running = {
        "metadata": {"name": "j-launcher-b2c4d", "labels": {ROLE: "launcher"}},
        "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
    }
    assert tracker.apply(pods("MODIFIED", running), 0) == [
        "launcher running (pod j-launcher-b2c4d)"
    ]
    assert tracker.apply(pods("MODIFIED", running), 0) == []
    assert tracker.launcher_to_follow() == "j-launcher-b2c4d"


def is_steady(tracker: JobTracker) -> bool:
    return tracker.steady


def steady_tracker() -> JobTracker:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.steady
    return tracker


def test_steady_once_the_launcher_runs_and_every_worker_is_ready() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1), launcher()), 0)
    assert not tracker.steady  # the MPIJob itself not seen yet
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    assert not tracker.steady  # worker 1 not Ready
    tracker.apply(pods("MODIFIED", worker(1, ready=True)), 0)
    assert is_steady(tracker)  # through a call: mypy keeps the narrowing of the asserts above
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.steady  # listed again (a 410 Gone): nothing changed


@pytest.mark.parametrize(
    "update",
    [
        pods("MODIFIED", worker(1)),
        pods("DELETED", worker(1, ready=True)),
        pods("MODIFIED", launcher(exit_code=0)),
        pods("MODIFIED", launcher(exit_code=1)),
        pods("DELETED", launcher()),
        pods("MODIFIED", worker(2)),
    ],
    ids=[
        "worker-not-ready",
        "worker-deleted",
        "launcher-done",
        "launcher-failed",
        "launcher-deleted",
        "new-pod",
    ],
)
def test_steady_ends_with_a_pod_change(update: WatchUpdate) -> None:
    tracker = steady_tracker()
    tracker.apply(update, 0)
    assert not tracker.steady


def test_steady_ends_when_a_pod_is_being_deleted() -> None:
    tracker = steady_tracker()
    going = launcher()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    tracker.apply(pods("MODIFIED", going), 0)
    assert not tracker.steady


def test_steady_again_with_a_relaunched_launcher() -> None:
    tracker = steady_tracker()
    tracker.apply(pods("MODIFIED", launcher(exit_code=1)), 0)
    tracker.apply(pods("ADDED", launcher("j-launcher-x7k2m")), 0)
    assert tracker.launcher_to_follow() == "j-launcher-x7k2m"
    assert tracker.steady  # the failed launcher pod stays; it has ended


def pulling(reason: str, message: str | None = None) -> JSON:
    pod = worker(0)
    waiting = {"reason": reason} | ({"message": message} if message else {})
    pod["status"]["containerStatuses"] = [
        {"name": "worker", "image": "img:1", "state": {"waiting": waiting}}
    ]
    return pod


def test_an_image_pull_error_gets_a_grace_period() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600)
    assert tracker.apply(pods(SYNC, pulling("ImagePullBackOff")), 0) == [
        "pod j-worker-0 cannot pull its image yet (ImagePullBackOff): the kubelet retries; "
        "giving up after 300s"
    ]
    assert tracker.apply(pods("MODIFIED", pulling("ErrImagePull", "not found")), 10) == []
    assert tracker.apply(pods("MODIFIED", pulling("ImagePullBackOff", "Back-off")), 20) == []
    tracker.check_time(299)
    assert tracker.verdict() is None
    tracker.check_time(300)
    verdict = tracker.verdict()
    assert verdict is not None and verdict.failure is not None
    # The registry's words from the last try, not the back-off in between.
    assert verdict.failure.message == (
        "pod j-worker-0 cannot pull image img:1 (ErrImagePull): not found"
    )


def test_an_image_pull_never_tried_gives_the_back_off() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600)
    tracker.apply(pods(SYNC, pulling("ImagePullBackOff")), 0)
    tracker.check_time(300)
    verdict = tracker.verdict()
    assert verdict is not None and verdict.failure is not None
    assert verdict.failure.message == (
        "pod j-worker-0 cannot pull image img:1 (ImagePullBackOff): ImagePullBackOff"
    )


def test_a_pulled_image_forgets_its_pull_error() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600)
    tracker.apply(pods(SYNC, pulling("ErrImagePull", "not found")), 0)
    tracker.apply(pods("MODIFIED", worker(0)), 10)
    tracker.apply(pods("MODIFIED", pulling("ImagePullBackOff", "Back-off")), 20)
    tracker.check_time(320)
    verdict = tracker.verdict()
    assert verdict is not None and verdict.failure is not None
    assert verdict.failure.message == (
        "pod j-worker-0 cannot pull image img:1 (ImagePullBackOff): Back-off"
    )


def test_an_invalid_image_name_fails_at_once() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600)
    assert tracker.apply(pods(SYNC, pulling("InvalidImageName")), 0) == []
    verdict = tracker.verdict()
    assert verdict is not None and verdict.failure is not None
    assert verdict.failure.kind is FailureKind.IMAGE_PULL


def test_setup_timeout_counts_from_when_every_pod_has_a_node() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600, setup_timeout=900)
    tracker.apply(pods(SYNC, worker(0, unschedulable="no GPU")), 0)
    tracker.apply(pods("MODIFIED", worker(0)), 100)
    tracker.check_time(999)
    assert tracker.verdict() is None
    tracker.check_time(1000)
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.SETUP,
            "worker j-worker-0 was not Ready after 900s of setup (kubernetes.setup_timeout): "
            "phase Pending",
            pod="j-worker-0",
        ),
    )


def test_an_mpijobfailed_event_ends_the_job() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    event = {
        "type": "Warning",
        "metadata": {"namespace": "ml"},
        "involvedObject": {"kind": "MPIJob", "name": "j"},
        "reason": "MPIJobFailed",
        "message": 'worker pod created failed: pods "j-worker-0" is forbidden: exceeded quota: q',
    }
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (event,)), 0) == []
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.REFUSED,
            "MPI Operator cannot create the job's pods: worker pod created failed: "
            'pods "j-worker-0" is forbidden: exceeded quota: q; fix: a ResourceQuota in namespace '
            "ml is used up: wait for other jobs to finish, ask for less (workers, resources), or "
            "have the quota raised",
        ),
    )
    assert tracker.decided_here


def test_the_launcher_jobs_events() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    involved = {"kind": "Job", "name": "j-launcher"}
    normal = {"type": "Normal", "involvedObject": involved, "reason": "SuccessfulCreate"}
    warning = {
        "type": "Warning",
        "involvedObject": involved,
        "reason": "FailedToUpdateEndpoint",
        "message": "no endpoint ",
    }
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (normal, warning, warning)), 0) == [
        "launcher Job: FailedToUpdateEndpoint: no endpoint"
    ]
    assert tracker.verdict() is None
    refused = {
        "type": "Warning",
        "involvedObject": involved,
        "reason": "FailedCreate",
        "message": 'Error creating: pods "j-launcher-x7k2p" is forbidden: failed quota: compute: '
        "must specify limits.memory for: launcher",
    }
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (refused,)), 1) == []
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.REFUSED,
            "the launcher Job cannot create the launcher's pod: Error creating: pods "
            '"j-launcher-x7k2p" is forbidden: failed quota: compute: must specify limits.memory '
            "for: launcher; fix: the namespace's ResourceQuota counts cpu and memory, so every "
            "container must declare them: set resources.launcher in train.yaml",
        ),
    )


def _failed_scheduling(pod: str, when: str, uid: str | None = None) -> JSON:
    involved = {"kind": "Pod", "name": pod, **({"uid": uid} if uid else {})}
    return {
        "type": "Warning",
        "involvedObject": involved,
        "reason": "FailedScheduling",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        "lastTimestamp": when,
    }


def test_events_older_than_the_job_never_start_a_timer() -> None:
    tracker = JobTracker(MpiJobKind("j"), 1, 600, setup_timeout=100_000)
    created = {**mpijob(), "metadata": {"name": "j", "creationTimestamp": "2026-12-02T10:00:00Z"}}
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (created,)), 0)
    # A relist (410, an API server restart) replays every Event still kept: one about a pod
    # that has a node by now, one about an earlier pod of that name, one of an earlier job.
    scheduled = worker(0)
    scheduled["metadata"]["uid"] = "uid-now"
    scheduled["spec"] = {"nodeName": "gpu-1"}
    tracker.apply(pods(SYNC, scheduled), 0)
    replayed = (
        _failed_scheduling("j-worker-0", "2026-12-02T10:00:05Z"),
        _failed_scheduling("j-worker-0", "2026-12-02T10:00:05Z", uid="uid-before"),
    )
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, replayed), 10) == []
    earlier_job = _failed_scheduling("j-worker-1", "2026-12-02T09:10:00Z")
    assert tracker.apply(WatchUpdate(EVENTS, "ADDED", (earlier_job,)), 10) == []
    tracker.check_time(10_000)
    assert tracker.verdict() is None
    # A new one about a pod not seen yet still counts (the Event may come before its status).
    fresh = _failed_scheduling("j-worker-1", "2026-12-02T10:00:07+00:00")
    assert tracker.apply(WatchUpdate(EVENTS, "ADDED", (fresh,)), 20) == [
        "workers pending: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    ]


def test_failed_scheduling_listed_before_the_pods_waits_for_them() -> None:
    # A retried CI job attaches: its Events listing may come before its pods listing, with the
    # scheduler's FailedScheduling of workers that have had a node for a while.
    tracker = JobTracker(MpiJobKind("j"), 1, 600, setup_timeout=100_000)
    replayed = _failed_scheduling("j-worker-0", "2026-12-02T10:00:05Z")
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (replayed,)), 0) == []
    scheduled = worker(0, ready=True)
    scheduled["spec"] = {"nodeName": "gpu-1"}
    assert tracker.apply(pods(SYNC, scheduled), 0) == ["workers ready 1/1"]
    tracker.check_time(10_000)
    assert tracker.verdict() is None
    # Listed before a pods listing that shows the worker still waiting: it counts then.
    tracker = JobTracker(MpiJobKind("j"), 1, 600, setup_timeout=100_000)
    assert tracker.apply(WatchUpdate(EVENTS, SYNC, (replayed,)), 0) == []
    assert tracker.apply(pods(SYNC, worker(0)), 5) == [
        "workers pending: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    ]
    tracker.check_time(605)
    assert tracker.verdict() is not None


def test_a_worker_replaced_after_its_eviction_still_explains_the_failure() -> None:
    # MPI Operator v0.8.2 creates a missing worker at once: the evicted pod's name comes back.
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    evicted = worker(1, ready=True)
    evicted["metadata"]["uid"] = "uid-evicted"
    tracker.apply(pods(SYNC, worker(0, ready=True), evicted, launcher()), 0)
    evicted = {**evicted, "status": {**evicted["status"], "phase": "Succeeded"}}
    evicted["status"]["conditions"] = [
        {"type": "Ready", "status": "False"},
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        },
    ]
    tracker.apply(pods("MODIFIED", evicted), 1)
    tracker.apply(pods("DELETED", evicted), 2)
    replacement = worker(1)
    replacement["metadata"]["uid"] = "uid-new"
    tracker.apply(pods("ADDED", replacement), 3)
    tracker.apply(pods("MODIFIED", launcher(exit_code=1)), 4)
    tracker.apply(
        WatchUpdate(MPIJOBS, "MODIFIED", (mpijob(("Failed", "BackoffLimitExceeded")),)), 5
    )
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.WORKER_FAILED,
            "worker j-worker-1 was stopped by the cluster (EvictionByEvictionAPI: Eviction API: "
            "evicting); the launcher then failed",
            pod="j-worker-1",
        ),
    )


def _suspended(suspend: bool, labels: JSON | None = None, *conditions: tuple[str, str]) -> JSON:
    job = mpijob(("Created", "MPIJobCreated"), *conditions)
    job["metadata"]["labels"] = labels or {}
    job["spec"]["runPolicy"] = {"suspend": suspend}
    return job


def test_a_suspended_job_is_queued_without_a_setup_timer() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, setup_timeout=900)
    kueue = {"kueue.x-k8s.io/queue-name": "team-a"}
    assert tracker.apply(WatchUpdate(MPIJOBS, SYNC, (_suspended(True, kueue),)), 0) == [
        "queued: MPIJob j is suspended (Kueue LocalQueue team-a); it starts when the queue "
        "admits it (kubernetes.setup_timeout does not run meanwhile)"
    ]
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (_suspended(True, kueue),)), 5) == []
    tracker.check_time(5000)
    assert tracker.verdict() is None
    resumed = tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (_suspended(False, kueue),)), 6000)
    assert resumed == ["resumed: the queue admitted MPIJob j; setting up"]
    tracker.apply(pods(SYNC, worker(0), worker(1)), 6000)
    tracker.check_time(6899)
    assert tracker.verdict() is None
    tracker.check_time(6900)
    verdict = tracker.verdict()
    assert verdict is not None and verdict.failure is not None
    assert verdict.failure.kind is FailureKind.SETUP


def test_a_suspension_after_the_start_is_a_preemption() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True)), 0)
    tracker.apply(pods("ADDED", launcher()), 0)
    suspended = mpijob(("Created", "MPIJobCreated"), ("Suspended", "MPIJobSuspended"))
    suspended["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "research"}}
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (suspended,)), 10) == [
        "preempted: MPIJob j was suspended after it started (queue research); its pods are "
        "deleted and it starts again when the queue resumes it (kubernetes.on_preemption: fail "
        "ends the run instead)"
    ]
    assert tracker.verdict() is None


KUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
PREEMPTED = (
    "preempted: MPIJob j was suspended after it started (Kueue LocalQueue team-a); its pods are "
    "deleted and it starts again when the queue resumes it (kubernetes.on_preemption: fail ends "
    "the run instead)"
)
RESUMED = "resumed: the queue admitted MPIJob j; setting up"
# What MPI Operator v0.8.2 leaves when it cannot resume the launcher Job: its sync stops before
# the MPIJob's status, so the Suspended condition stays True.
STALLED = _suspended(False, KUEUE, ("Suspended", "MPIJobSuspended"))


def _running(tracker: JobTracker) -> None:
    """Both workers Ready and the launcher running."""
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (_suspended(False, KUEUE),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True)), 0)
    tracker.apply(pods("ADDED", launcher()), 0)
    assert tracker.steady


def _preempted(tracker: JobTracker, now: float) -> list[str]:
    """The queue suspends the job and the operator deletes its pods: the suspension's lines."""
    suspended = _suspended(True, KUEUE, ("Suspended", "MPIJobSuspended"))
    lines = tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (suspended,)), now)
    for pod in (launcher(), worker(0, ready=True), worker(1, ready=True)):
        assert tracker.apply(pods("DELETED", pod), now) == []
    return lines


def test_a_preemption_ends_the_run_when_train_yaml_says_fail() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, on_preemption="fail")
    _running(tracker)
    assert _preempted(tracker, 10) == []
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.PREEMPTED,
            "MPIJob j was preempted (Kueue LocalQueue team-a): suspended after it started, and "
            "kubernetes.on_preemption is fail (wait keeps the run waiting for the queue to "
            "resume it)",
        ),
    )
    assert tracker.decided_here


def test_a_job_queued_before_it_starts_waits_even_when_train_yaml_says_fail() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, setup_timeout=900, on_preemption="fail")
    assert tracker.apply(WatchUpdate(MPIJOBS, SYNC, (_suspended(True, KUEUE),)), 0) == [
        "queued: MPIJob j is suspended (Kueue LocalQueue team-a); it starts when the queue "
        "admits it (kubernetes.setup_timeout does not run meanwhile)"
    ]
    tracker.check_time(5000)
    assert tracker.verdict() is None


def test_a_resumed_job_sets_up_again_from_the_start() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, setup_timeout=900)
    _running(tracker)
    assert _preempted(tracker, 10) == [PREEMPTED]
    tracker.check_time(5000)
    assert tracker.verdict() is None
    resumed = _suspended(False, KUEUE)
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (resumed,)), 6000) == [RESUMED]
    assert tracker.launcher_to_follow() is None  # the launcher from before is gone
    assert tracker.apply(pods("ADDED", worker(0), worker(1)), 6000) == []
    assert tracker.apply(pods("MODIFIED", worker(0, ready=True)), 6010) == ["workers ready 1/2"]
    assert tracker.apply(pods("MODIFIED", worker(1, ready=True)), 6020) == ["workers ready 2/2"]
    tracker.check_time(6899)
    assert tracker.verdict() is None
    assert tracker.apply(pods("ADDED", launcher("j-launcher-x7k2m")), 6100) == [
        "launcher running (pod j-launcher-x7k2m)"
    ]
    assert tracker.launcher_to_follow() == "j-launcher-x7k2m"
    assert tracker.steady
    tracker.check_time(9000)
    assert tracker.verdict() is None


def test_a_second_suspension_after_a_resume_is_a_preemption_too() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    _running(tracker)
    assert _preempted(tracker, 10) == [PREEMPTED]
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (_suspended(False, KUEUE),)), 20) == [
        RESUMED
    ]
    assert tracker.apply(pods("ADDED", worker(0), worker(1)), 30) == []
    assert _preempted(tracker, 40) == [PREEMPTED]


def test_a_resume_the_operator_never_takes_in_fails_after_the_setup_timeout() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, setup_timeout=900)
    _running(tracker)
    _preempted(tracker, 10)
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (STALLED,)), 100) == [RESUMED]
    update = pods("ADDED", worker(0, ready=True), worker(1, ready=True))
    assert tracker.apply(update, 150) == ["workers ready 2/2"]
    tracker.check_time(999)
    assert tracker.verdict() is None
    tracker.check_time(1000)
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.SETUP,
            "every worker is Ready but no launcher started within 900s of setup after the "
            "resume (kubernetes.setup_timeout): MPIJob j still has the condition Suspended=True "
            "while its spec.runPolicy.suspend is false, so MPI Operator has not resumed its "
            "launcher Job (it must update the Job's status first); fix: add update on "
            "jobs/status (API group batch) to the MPI Operator's ClusterRole",
        ),
    )
    assert tracker.decided_here


@pytest.mark.parametrize(
    ("job", "workers", "message", "pod"),
    [
        # The operator took the resume in (no Suspended=True) and still starts no launcher.
        (
            _suspended(False, KUEUE),
            (worker(0, ready=True), worker(1, ready=True)),
            "the launcher did not start within 900s (kubernetes.setup_timeout)",
            None,
        ),
        # A worker not Ready is named first, whatever the MPIJob's conditions.
        (
            STALLED,
            (worker(0, ready=True), worker(1)),
            "worker j-worker-1 was not Ready after 900s of setup (kubernetes.setup_timeout): "
            "phase Pending",
            "j-worker-1",
        ),
        # A worker the operator has not made again: not every worker is Ready.
        (
            STALLED,
            (worker(0, ready=True),),
            "the launcher did not start within 900s (kubernetes.setup_timeout)",
            None,
        ),
    ],
)
def test_a_resumed_job_without_a_launcher_fails_after_the_setup_timeout(
    job: JSON, workers: tuple[JSON, ...], message: str, pod: str | None
) -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, setup_timeout=900)
    _running(tracker)
    _preempted(tracker, 10)
    tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (job,)), 100)
    tracker.apply(pods("ADDED", *workers), 150)
    tracker.check_time(999)
    assert tracker.verdict() is None
    tracker.check_time(1000)
    assert tracker.verdict() == Verdict(
        Outcome.FAILED, Failure(FailureKind.SETUP, message, pod=pod)
    )


def test_a_worker_failing_its_setup_after_a_resume_fails_the_job() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    _running(tracker)
    _preempted(tracker, 10)
    tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (_suspended(False, KUEUE),)), 20)
    failed = worker(1)
    failed["status"]["initContainerStatuses"] = [
        {"name": "install-requirements", "state": {"terminated": {"exitCode": 1}}}
    ]
    tracker.apply(pods("ADDED", worker(0), failed), 30)
    assert tracker.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.SETUP,
            "worker j-worker-1: init container install-requirements exited with code 1",
            1,
            pod="j-worker-1",
            container="install-requirements",
        ),
    )


def test_a_worker_killed_by_a_preemption_before_the_launcher_started_is_no_setup_failure() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (_suspended(False, KUEUE),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True)), 0)
    suspended = _suspended(True, KUEUE, ("Suspended", "MPIJobSuspended"))
    assert tracker.apply(WatchUpdate(MPIJOBS, "MODIFIED", (suspended,)), 10) == [PREEMPTED]
    killed = worker(0)
    killed["status"]["containerStatuses"] = [
        {"name": "worker", "state": {"terminated": {"exitCode": 137}}}
    ]
    tracker.apply(pods("MODIFIED", killed), 11)
    assert tracker.verdict() is None


def held(exit_code: int, *sidecars: str) -> JSON:
    """The launcher pod Running after its container exited ``exit_code``: ``sidecars`` run."""
    pod = launcher()
    pod["status"]["containerStatuses"] = [
        {"name": "launcher", "state": {"terminated": {"exitCode": exit_code}}},
        *({"name": name, "state": {"running": {}}} for name in sidecars),
    ]
    return pod


HELD = (
    "launcher container launcher in pod j-launcher-b2c4d exited with code {code}, but container "
    "istio-proxy keeps the pod running (injected as plain containers, they never stop, and MPI "
    "Operator never sees the launcher end); ci-runner takes the launcher's exit code as the "
    "job's in 60s; fix: ask the cluster's administrators to inject the proxy as a native sidecar "
    "(an init container with restartPolicy Always, which the kubelet stops when the others end: "
    "Istio 1.27+ does by default, ENABLE_NATIVE_SIDECARS; Linkerd with "
    "config.beta.linkerd.io/proxy-enable-native-sidecar), or not to inject it in this namespace"
)


def test_a_launcher_pod_its_sidecar_keeps_running_is_decided_by_the_launcher_s_exit_code() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(WatchUpdate(MPIJOBS, SYNC, (mpijob(("Created", "MPIJobCreated")),)), 0)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.apply(pods("MODIFIED", held(0, "istio-proxy")), 10) == [HELD.format(code=0)]
    assert tracker.apply(pods("MODIFIED", held(0, "istio-proxy")), 11) == []  # said once
    tracker.check_time(69)
    assert tracker.verdict() is None
    tracker.check_time(70)
    assert tracker.verdict() == Verdict(Outcome.SUCCEEDED)
    assert not tracker.decided_here  # the end as on success: the log drained, the job deleted


def test_a_launcher_that_failed_in_a_pod_its_sidecar_keeps_running_fails_the_job() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.apply(pods("MODIFIED", held(3, "istio-proxy")), 10) == [HELD.format(code=3)]
    tracker.check_time(70)
    message = (
        "launcher j-launcher-b2c4d exited with code 3 (its pod kept running for container "
        "istio-proxy: fix: ask the cluster's administrators to inject the proxy as a native "
        "sidecar (an init container with restartPolicy Always, which the kubelet stops when the "
        "others end: Istio 1.27+ does by default, ENABLE_NATIVE_SIDECARS; Linkerd with "
        "config.beta.linkerd.io/proxy-enable-native-sidecar), or not to inject it in this "
        "namespace)"
    )
    failure = Failure(
        FailureKind.EXIT_CODE, message, exit_code=3, pod="j-launcher-b2c4d", container="launcher"
    )
    assert tracker.verdict() == Verdict(Outcome.FAILED, failure)
    assert tracker.decided_here


def test_a_launcher_pod_that_ends_by_itself_is_never_held() -> None:
    tracker = JobTracker(MpiJobKind("j"), 2, 600, launcher_decides=False)
    tracker.apply(pods(SYNC, worker(0, ready=True), worker(1, ready=True), launcher()), 0)
    assert tracker.apply(pods("MODIFIED", held(0)), 10) == []  # the sidecar has stopped too
    ended = held(0, "istio-proxy")
    ended["status"]["phase"] = "Succeeded"
    assert tracker.apply(pods("MODIFIED", ended), 11) == []
    tracker.check_time(1000)
    assert tracker.verdict() is None  # a kept job waits for the operator's condition


JOBS = Resource("batch", "v1", "jobs", "Job")


@dataclass(frozen=True)
class LabelledJobKind:
    """A stand-in second kind of job behind the same follower: a batch/v1 Job whose pods say
    their role in a label of ours, ended by the Job's Complete or Failed condition."""

    name: str = "t"
    followed_container: str = "main"
    resource: Resource = JOBS

    def role(self, pod: JSON) -> Role | None:
        label = pod.get("metadata", {}).get("labels", {}).get("role")
        return {"leader": Role.LAUNCHER, "node": Role.WORKER}.get(str(label))

    def role_of(self, pod_name: str) -> Role:
        return Role.LAUNCHER if pod_name.endswith("-0") else Role.WORKER

    def workers(self, job: JSON, default: int) -> int:
        return int(job.get("spec", {}).get("completions", default))

    def suspended(self, job: JSON) -> bool:
        return bool(job.get("spec", {}).get("suspend"))

    def finished(self, job: JSON) -> bool:
        return self.ended(job, {}) is not None

    def ended(self, job: JSON, pods: Mapping[str, JSON]) -> Verdict | None:
        conditions = {c["type"] for c in job.get("status", {}).get("conditions", [])}
        if "Complete" in conditions:
            return Verdict(Outcome.SUCCEEDED)
        if "Failed" in conditions:
            return Verdict(Outcome.FAILED, Failure(FailureKind.UNKNOWN, "Job failed"))
        return None

    def event(self, event: JSON) -> EventNews | None:
        return None

    def stalled_resume(self, job: JSON, seconds: float) -> Failure | None:
        return None

    def queued_line(self, job: JSON) -> str:
        return "queued"

    def preempted_line(self, job: JSON) -> str:
        return "preempted"

    def resumed_line(self, job: JSON) -> str:
        return "resumed"

    def preempted_failure(self, job: JSON) -> Failure:
        return Failure(FailureKind.PREEMPTED, "preempted")

    def deleted_failure(self) -> Failure:
        return Failure(FailureKind.CANCELLED, "Job t was deleted")


def _labelled(name: str, role: str, pod: JSON) -> JSON:
    return {**pod, "metadata": {"name": name, "labels": {"role": role}}}


def test_another_kind_of_job_is_followed_the_same_way() -> None:
    kind: JobKind = LabelledJobKind()
    tracker = JobTracker(kind, 1, 600)
    job: JSON = {"metadata": {"name": "t"}, "spec": {"completions": 1}}
    assert tracker.apply(WatchUpdate(kind.resource, SYNC, (job,)), 0) == []
    node = _labelled("t-node-1", "node", worker(1, ready=True))
    leader = _labelled("t-leader-0", "leader", launcher())
    assert tracker.apply(pods(SYNC, node, leader), 1) == [
        "workers ready 1/1",
        "launcher running (pod t-leader-0)",
    ]
    assert tracker.launcher_to_follow() == "t-leader-0"
    assert tracker.steady
    assert tracker.running_workers() == ["t-node-1"]
    done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    tracker.apply(WatchUpdate(kind.resource, "MODIFIED", (done,)), 2)
    assert tracker.verdict() == Verdict(Outcome.SUCCEEDED)
    assert tracker.finished_on_cluster
