"""IndexedJobKind (distributed: torchrun): the follower on a batch/v1 Indexed Job, fed JSON as the
Job controller and the kubelet write it, and every line and failure text exactly.

The shapes are kubernetes v1.35.4's: pkg/controller/job/job_controller.go (the conditions: with
backoffLimitPerIndex and maxFailedIndexes 0 one failed index is FailureTarget then Failed,
reason MaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed
indexes"; DeadlineExceeded "Job was active longer than specified deadline"; status.failedIndexes;
the Warning Event of the same reason; FailedCreate "Error creating: ..." from
pkg/controller/controller_utils.go), pkg/controller/job/indexed_job_utils.go (the pods' name
``<job>-<index>-<random>``, label and annotation batch.kubernetes.io/job-completion-index),
pkg/registry/batch/job/strategy.go (the labels batch.kubernetes.io/job-name, controller-uid),
pkg/kubelet/active_deadline.go and pkg/kubelet/eviction/helpers.go (a pod's own deadline and
eviction: status.reason DeadlineExceeded, Evicted).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ci_runner.backends.kubernetes import indexed_explain
from ci_runner.backends.kubernetes.indexed_job import IndexedJobKind
from ci_runner.backends.kubernetes.jobkind import Verdict
from ci_runner.backends.kubernetes.kinds import job_kind
from ci_runner.backends.kubernetes.launcher_log import WholeLines
from ci_runner.backends.kubernetes.mpijob import MpiJobKind
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import EVENTS, JOBS, PODS
from ci_runner.backends.kubernetes.tracker import JobTracker
from ci_runner.backends.kubernetes.traits import KindTraits, LauncherTraits, traits_of
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.result import Failure, FailureKind, Outcome

JSON = dict[str, Any]
START = "2026-12-05T10:00:00Z"
ENDED = "2026-12-05T10:05:00Z"
POD = {0: "j-0-b2c4d", 1: "j-1-x7k2p"}


def job(*conditions: tuple[str, str, str], failed_indexes: str | None = None) -> JSON:
    """Job j as the Job controller leaves it: (type, reason, message) conditions True."""
    status: JSON = {"startTime": START, "active": 2, "ready": 0, "terminating": 0}
    if failed_indexes is not None:
        status["failedIndexes"] = failed_indexes
    if conditions:
        status["conditions"] = [
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastProbeTime": ENDED,
                "lastTransitionTime": ENDED,
            }
            for kind, reason, message in conditions
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "uid": "u1", "creationTimestamp": START},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 2147483647,  # defaulted when backoffLimitPerIndex is set
            "backoffLimitPerIndex": 0,
            "maxFailedIndexes": 0,
            "podReplacementPolicy": "Failed",
            "activeDeadlineSeconds": 3600,
            "suspend": False,
        },
        "status": status,
    }


FAILED_INDEX = (
    "FailureTarget",
    "MaxFailedIndexesExceeded",
    "Job has exceeded the specified maximal number of failed indexes",
)


def node(index: int, state: JSON | None = None, phase: str | None = None, **status: Any) -> JSON:
    """Node ``index``'s pod (torchrun running, unless ``state``: its container's state)."""
    running = state is None
    container: JSON = {
        "name": "torchrun",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": {"running": {"startedAt": START}} if running else state,
    }
    conditions = [{"type": "Ready", "status": "True" if running else "False"}]
    return {
        "metadata": {
            "name": POD[index],
            "creationTimestamp": START,
            "labels": {
                "batch.kubernetes.io/controller-uid": "u1",
                "batch.kubernetes.io/job-name": "j",
                "controller-uid": "u1",
                "job-name": "j",
                "batch.kubernetes.io/job-completion-index": str(index),
                "ci-runner/job": "j",
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {
            "hostname": f"j-{index}",
            "subdomain": "j",
            "activeDeadlineSeconds": 4200,
            "containers": [{"name": "torchrun", "resources": {"limits": {"memory": "4Gi"}}}],
        },
        "status": {
            "phase": phase or ("Running" if running else "Failed"),
            "conditions": conditions,
            "containerStatuses": [container],
            **status,
        },
    }


def exited(code: int, reason: str = "Error") -> JSON:
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": ENDED}}


def pods(kind: str, *objects: JSON) -> WatchUpdate:
    return WatchUpdate(PODS, kind, objects)


def tracker(**options: Any) -> JobTracker:
    return JobTracker(IndexedJobKind("j"), 2, 600, **options)


def failure_of(*pods_seen: JSON, conditions: tuple[str, str, str] = FAILED_INDEX) -> Failure:
    verdict = IndexedJobKind("j").ended(
        job(conditions, failed_indexes="1"), {p["metadata"]["name"]: p for p in pods_seen}
    )
    assert verdict is not None and verdict.failure is not None
    return verdict.failure


# -- the kind -------------------------------------------------------------------------------


def test_a_node_s_role_is_its_completion_index() -> None:
    kind = IndexedJobKind("j")
    assert [kind.role(node(0)), kind.role(node(1)), kind.role({"metadata": {}})] == [
        Role.LAUNCHER,
        Role.WORKER,
        None,
    ]
    assert [kind.role_of("j-0-b2c4d"), kind.role_of("j-1-x7k2p")] == [Role.LAUNCHER, Role.WORKER]
    assert kind.workers(job(), 5) == 2
    assert (kind.pod_selector, kind.worker_selector) == (
        "batch.kubernetes.io/job-name=j",
        "batch.kubernetes.io/job-name=j,batch.kubernetes.io/job-completion-index!=0",
    )


def test_pod_names_as_the_job_controller_generates_them() -> None:
    # podGenerateNameWithIndex: <job>-<index>-, cut to 58 characters, then 5 random ones.
    long = "a" * 60
    assert indexed_explain.name_prefix("j", 12) == "j-12-"
    assert indexed_explain.name_prefix(long, 3) == "a" * 55 + "-3-"
    assert indexed_explain.index_of("j-12-x7k2p", "j") == 12
    assert indexed_explain.index_of("a" * 55 + "-3-x7k2p", long) == 3
    assert indexed_explain.index_of("jx-1-x7k2p", "j") is None
    assert indexed_explain.index_of("j-worker-1", "j") is None


def test_events_of_the_job_and_its_node_pods_only() -> None:
    kind = IndexedJobKind("j")

    def involving(kind_: str, name: str, uid: str = "") -> JSON:
        return {"involvedObject": {"kind": kind_, "name": name, "uid": uid}}

    kept = [involving("Job", "j", "u1"), involving("Job", "j"), involving("Pod", "j-1-x7k2p")]
    left = [
        involving("Job", "j", "u0"),
        involving("Job", "j-launcher"),
        involving("Pod", "k-0-abcde"),
    ]
    assert [kind.about(e, "u1") for e in kept] == [True] * 3
    assert [kind.about(e, "u1") for e in left] == [False] * 3


def test_the_kinds_and_their_traits() -> None:
    indexed: KindTraits = IndexedJobKind("j")  # every trait its own (checked by mypy)
    assert traits_of(IndexedJobKind("j")) == indexed
    assert traits_of(MpiJobKind("j")) == LauncherTraits(MpiJobKind("j"))
    assert job_kind("Job", "j", "torchrun") == IndexedJobKind("j")
    assert job_kind("MPIJob", "j") == MpiJobKind("j")
    with pytest.raises(ValueError, match="an MPIJob or a batch/v1 Job"):
        job_kind("TrainJob", "j")


def test_suspended_by_its_spec_else_its_condition() -> None:
    kind = IndexedJobKind("j")
    suspended = {**job(), "spec": {**job()["spec"], "suspend": True}}
    assert [kind.suspended(job()), kind.suspended(suspended)] == [False, True]
    unset = {"spec": {}, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert kind.suspended(unset)


# -- following it ---------------------------------------------------------------------------


def test_every_node_is_waited_on_and_logged() -> None:
    follower = tracker()
    assert follower.apply(WatchUpdate(JOBS, SYNC, (job(),)), 0) == []
    assert follower.apply(pods(SYNC, node(1)), 1) == ["nodes ready 1/2"]
    assert follower.logs_to_follow() == [POD[1]]
    assert not follower.steady
    assert follower.apply(pods("MODIFIED", node(0)), 2) == ["nodes ready 2/2"]
    assert follower.logs_to_follow() == [POD[1], POD[0]]
    assert follower.launcher_to_follow() == POD[0]
    assert follower.steady


def test_node_0_s_success_ends_the_job_unless_another_node_failed() -> None:
    follower = tracker()
    follower.apply(WatchUpdate(JOBS, SYNC, (job(),)), 0)
    follower.apply(pods(SYNC, node(0), node(1)), 1)
    follower.apply(pods("MODIFIED", node(1, exited(1))), 2)
    follower.apply(pods("MODIFIED", node(0, exited(0, "Completed"), "Succeeded")), 3)
    assert follower.verdict() is None  # the Job's condition will say why
    ok = tracker()
    ok.apply(WatchUpdate(JOBS, SYNC, (job(),)), 0)
    ok.apply(pods(SYNC, node(0), node(1)), 1)
    ok.apply(pods("MODIFIED", node(0, exited(0, "Completed"), "Succeeded")), 2)
    assert ok.verdict() == Verdict(Outcome.SUCCEEDED)


@pytest.mark.parametrize(
    "condition",
    [
        ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
        ("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
    ],
)
def test_the_job_s_success_conditions_end_it(condition: tuple[str, str, str]) -> None:
    follower = tracker(launcher_decides=False)
    follower.apply(WatchUpdate(JOBS, SYNC, (job(condition),)), 0)
    assert follower.verdict() == Verdict(Outcome.SUCCEEDED)
    assert follower.finished_on_cluster


def test_a_failed_node_fails_the_job_in_one_line() -> None:
    follower = tracker()
    follower.apply(pods(SYNC, node(0), node(1, exited(1))), 0)
    # The Job controller stops node 0 once index 1 failed: torchrun exits 143 on SIGTERM.
    follower.apply(
        pods(
            "MODIFIED",
            node(
                0,
                {
                    "terminated": {
                        "exitCode": 143,
                        "reason": "Error",
                        "finishedAt": "2026-12-05T10:05:09Z",
                    }
                },
            ),
        ),
        1,
    )
    follower.apply(WatchUpdate(JOBS, SYNC, (job(FAILED_INDEX, failed_indexes="1"),)), 2)
    assert follower.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.EXIT_CODE,
            "node 1 (pod j-1-x7k2p) exited with code 1",
            exit_code=1,
            pod="j-1-x7k2p",
            container="torchrun",
        ),
    )
    assert not follower.decided_here


def test_why_a_node_failed() -> None:
    oom = node(1, exited(137, "OOMKilled"))
    assert failure_of(node(0), oom) == Failure(
        FailureKind.OOM_KILLED,
        "node 1 (pod j-1-x7k2p) was OOMKilled (memory limit 4Gi); fix: raise resources.memory, "
        "or use less memory per rank (what ranks write to /dev/shm counts too)",
        exit_code=137,
        pod="j-1-x7k2p",
        container="torchrun",
    )
    preempted = node(1, exited(143))
    preempted["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "Preempted in order to admit critical pod",
            "lastTransitionTime": "2026-12-05T10:04:58Z",
        }
    )
    assert failure_of(node(0), preempted).message == (
        "node 1 (pod j-1-x7k2p) was stopped by the cluster (PreemptionByScheduler: Preempted in "
        "order to admit critical pod)"
    )
    own_deadline = node(
        1,
        exited(143),
        reason="DeadlineExceeded",
        message="Pod was active on the node longer than the specified deadline",
    )
    assert failure_of(own_deadline) == Failure(
        FailureKind.DEADLINE,
        "node 1 (pod j-1-x7k2p) ran past its own time limit of 4200s (activeDeadlineSeconds) and "
        "was stopped",
        pod="j-1-x7k2p",
    )
    evicted = node(
        1, exited(137), reason="Evicted", message="The node was low on resource: memory. "
    )
    assert failure_of(evicted).message == (
        "node 1 (pod j-1-x7k2p) was evicted: The node was low on resource: memory."
    )


def test_the_failed_index_is_blamed_before_the_nodes_stopped_after_it() -> None:
    first = node(0, {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": START}})
    assert failure_of(first, node(1, exited(2))).message == (
        "node 1 (pod j-1-x7k2p) exited with code 2"
    )


def test_the_job_s_deadline() -> None:
    deadline = (
        "FailureTarget",
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert failure_of(node(0, exited(143)), node(1, exited(143)), conditions=deadline) == Failure(
        FailureKind.DEADLINE,
        "the job ran past its time limit of 3600s (activeDeadlineSeconds) and was stopped",
    )


def test_a_failure_no_pod_explains() -> None:
    reason = ("Failed", "PodFailurePolicy", "Container torchrun for pod ml/j-1-x7k2p failed")
    assert failure_of(conditions=reason) == Failure(
        FailureKind.UNKNOWN,
        "Job failed: PodFailurePolicy: Container torchrun for pod ml/j-1-x7k2p failed",
    )


# -- setting up -----------------------------------------------------------------------------


def setting_up(index: int, init: JSON) -> JSON:
    pod = node(index, {"waiting": {"reason": "PodInitializing"}}, "Pending")
    pod["status"]["initContainerStatuses"] = [
        {"name": "fetch-code", "state": exited(0, "Completed")},
        {"name": "install-requirements", "state": init},
    ]
    return pod


def test_a_node_failing_to_set_up_fails_the_job_here() -> None:
    follower = tracker()
    follower.apply(pods(SYNC, node(0), setting_up(1, exited(1))), 0)
    assert follower.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.SETUP,
            "node 1 (pod j-1-x7k2p): init container install-requirements exited with code 1",
            exit_code=1,
            pod="j-1-x7k2p",
            container="install-requirements",
        ),
    )
    assert follower.decided_here


def test_setting_up_times_out_until_every_node_started() -> None:
    follower = tracker(setup_timeout=600)
    running = {"running": {"startedAt": START}}
    follower.apply(pods(SYNC, node(0), setting_up(1, running)), 0)  # node 0 waits in torchrun
    follower.check_time(599)
    assert follower.verdict() is None
    follower.check_time(600)
    assert follower.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.SETUP,
            "node 1 (pod j-1-x7k2p) had not started after 600s of setup "
            "(kubernetes.setup_timeout): init container install-requirements still running",
            pod="j-1-x7k2p",
        ),
    )
    done = tracker(setup_timeout=600)
    done.apply(pods(SYNC, node(0), node(1)), 0)
    done.check_time(6000)
    assert done.verdict() is None


def test_pending_nodes_and_queue_lines() -> None:
    follower = tracker()
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pending = node(1, {"waiting": {}}, "Pending")
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    assert follower.apply(pods(SYNC, pending), 0) == [f"nodes pending: {message}"]
    queued = {**job(), "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "gpu"}}}
    queued["spec"] = {**queued["spec"], "suspend": True}
    fresh = tracker()
    assert fresh.apply(WatchUpdate(JOBS, SYNC, (queued,)), 0) == [
        "queued: Job j is suspended (Kueue LocalQueue gpu); it starts when the queue admits it "
        "(kubernetes.setup_timeout does not run meanwhile)"
    ]
    resumed = {**queued, "spec": {**queued["spec"], "suspend": False}}
    assert fresh.apply(WatchUpdate(JOBS, "MODIFIED", (resumed,)), 1) == [
        "resumed: the queue admitted Job j; setting up"
    ]
    fresh.apply(pods(SYNC, node(0), node(1)), 2)
    assert fresh.apply(WatchUpdate(JOBS, "MODIFIED", (queued,)), 3) == [
        "preempted: Job j was suspended after it started (Kueue LocalQueue gpu); its pods are "
        "deleted and it starts again when the queue resumes it (kubernetes.on_preemption: fail "
        "ends the run instead)"
    ]
    fresh.apply(WatchUpdate(JOBS, "DELETED", (queued,)), 4)
    assert IndexedJobKind("j").deleted_failure() == Failure(
        FailureKind.CANCELLED, "Job j was deleted before it finished"
    )


def test_node_0_held_by_a_sidecar() -> None:
    follower = tracker()
    held = node(0, phase="Running")
    held["status"]["containerStatuses"] = [
        {"name": "torchrun", "state": exited(0, "Completed")},
        {"name": "istio-proxy", "state": {"running": {"startedAt": START}}},
    ]
    follower.apply(pods(SYNC, node(0)), 0)
    assert follower.apply(pods("MODIFIED", held), 1) == [
        "node 0's container torchrun in pod j-0-b2c4d exited with code 0, but container "
        "istio-proxy keeps the pod running (injected as plain containers, they never stop, and "
        "the Job controller never sees the node end); ci-runner takes node 0's exit code as the "
        "job's in 60s; fix: ask the cluster's administrators to inject the proxy as a native "
        "sidecar (an init container with restartPolicy Always, which the kubelet stops when the "
        "others end: Istio 1.27+ does by default, ENABLE_NATIVE_SIDECARS; Linkerd with "
        "config.beta.linkerd.io/proxy-enable-native-sidecar), or not to inject it in this "
        "namespace"
    ]


# -- the Job controller's Events --------------------------------------------------------------


def job_event(reason: str, message: str, kind: str = "Warning") -> JSON:
    return {
        "metadata": {"name": "j.1", "namespace": "ml"},
        "involvedObject": {"kind": "Job", "name": "j", "uid": "u1", "apiVersion": "batch/v1"},
        "type": kind,
        "reason": reason,
        "message": message,
    }


def test_a_refused_node_pod_fails_the_job() -> None:
    quota = (
        'Error creating: pods "j-1-x7k2p" is forbidden: exceeded quota: gpus, requested: '
        "nvidia.com/gpu=1, used: nvidia.com/gpu=1, limited: nvidia.com/gpu=1"
    )
    follower = tracker()
    follower.apply(WatchUpdate(EVENTS, "ADDED", (job_event("FailedCreate", quota),)), 0)
    assert follower.verdict() == Verdict(
        Outcome.FAILED,
        Failure(
            FailureKind.REFUSED,
            f"the Job cannot create its nodes' pods: {quota}; fix: a ResourceQuota in namespace "
            "ml is used up: wait for other jobs to finish, ask for less (workers, resources), or "
            "have the quota raised",
        ),
    )
    security = (
        'Error creating: pods "j-0-b2c4d" is forbidden: violates PodSecurity "restricted:latest": '
        'unrestricted capabilities (container "istio-init" must set '
        'securityContext.capabilities.drop=["ALL"])'
    )
    refused = indexed_explain.refused(job_event("FailedCreate", security))
    assert refused is not None
    assert refused.message.endswith(
        "; fix: namespace ml enforces PodSecurity restricted (label "
        "pod-security.kubernetes.io/enforce); ci-runner's torchrun pods meet restricted: what "
        "the message names was added to them by the cluster (a mutating admission webhook), ask "
        "its administrators"
    )


def test_other_warnings_of_the_job_are_said_once_and_its_end_is_left_to_its_condition() -> None:
    follower = tracker()
    warning = job_event(
        "TooManySucceededPods", "Too many succeeded pods running after completion count reached"
    )
    assert follower.apply(WatchUpdate(EVENTS, "ADDED", (warning, warning)), 0) == [
        "Job: TooManySucceededPods: Too many succeeded pods running after completion count reached"
    ]
    ended = job_event("MaxFailedIndexesExceeded", FAILED_INDEX[2])
    normal = job_event("SuccessfulCreate", "Created pod: j-0-b2c4d", "Normal")
    assert follower.apply(WatchUpdate(EVENTS, "ADDED", (ended, normal)), 1) == []
    assert follower.verdict() is None


# -- every node's log in one sink -----------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.fed: list[bytes] = []

    def feed(self, data: bytes | str) -> None:
        self.fed.append(data if isinstance(data, bytes) else data.encode())


def test_nodes_logs_reach_the_sink_in_whole_lines() -> None:
    sink, lock = Sink(), threading.Lock()
    zero, one = WholeLines(sink, lock), WholeLines(sink, lock)
    zero.feed(b"[0]<std>:epoch 1 ")
    one.feed(b"[1]<std>:epoch 1 loss 0.8\n[1]<std>:ep")
    zero.feed(b"loss 0.9\n")
    one.feed("och 2\n")
    zero.feed(b"[0]<std>:done")
    zero.close()
    one.close()
    assert sink.fed == [
        b"[1]<std>:epoch 1 loss 0.8\n",
        b"[0]<std>:epoch 1 loss 0.9\n",
        b"[1]<std>:epoch 2\n",
        b"[0]<std>:done\n",
    ]
