"""KubernetesBackend end to end on the scripted cluster: the real kubernetes client against the
real kube-apiserver, controllers, scheduler and MPI Operator v0.8.2 (testing/scripted_cluster/),
through the fault proxy that counts its requests and breaks its connections.

Each scenario plays the nodes' part step by step and asserts the exact CI log and RunResult.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ClusterError
from ci_runner.render import render_mpijob
from testing.backend_harness import Cluster, submitted
from testing.kube_api import Informer
from testing.mpijob_manifests import JOB, JSON, mpijob_manifest
from testing.plan_cases import trusted_plan
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario
from testing.waiting import wait_for

pytestmark = pytest.mark.control_plane

DELETED = f"[ci-runner] deleted MPIJob {JOB}, its pods and its Secret"
LOG = ["[0]<stdout>:epoch 1 loss 0.9", "[1]<stdout>:epoch 1 loss 0.8"]


def start_training(cluster: Cluster) -> JobScenario:
    """Submit, then workers and launcher come up and the launcher logs LOG; the job runs
    steadily, so the backend watches its pods alone."""
    job = cluster.started()
    job.to_the_launcher(cluster.log, *LOG)
    cluster.wait_watching_pods_alone()
    return job


def drop_every_watch(cluster: Cluster) -> None:
    """Break every open watch (as a lost connection does); wait until each is back."""
    api = cluster.api
    watched = cluster.watched()
    watches = sum(api.count("watch", r) for r in ("pods", "mpijobs", "events"))
    api.drop_watches()
    api.wait_until(
        lambda: (
            sum(api.count("watch", r) for r in ("pods", "mpijobs", "events"))
            == watches + len(watched)
            and cluster.watched() == watched
        )
    )


def requests_made(cluster: Cluster) -> dict[str, int]:
    return cluster.api.counts()


def running_lines(cluster: Cluster, job: JobScenario) -> list[str]:
    return [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {job.launcher_pod})",
        *LOG,
    ]


def test_success(cluster: Cluster, tmp_path: Path) -> None:
    """Scripted: on real nodes as test_the_example_trains_on_two_workers_over_ssh_between_pods; here
    the exact CI-log lines and RunResult, a masked token and no sleep on the ManualClock."""
    job = start_training(cluster)
    job.launcher_log("[0]<stdout>:token glcbt-64-secret-job-token")
    job.launcher_exits(0)
    result = cluster.result()
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        "[0]<stdout>:token [MASKED]",
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert result.outcome is Outcome.SUCCEEDED
    assert result.failure is None
    assert result.exit_code == 0
    assert result.mpijob_name == JOB
    assert result.log_path.parent == tmp_path
    assert result.log_path.read_text() == "\n".join([*LOG, "[0]<stdout>:token [MASKED]"]) + "\n"
    assert result.log_tail == (*LOG, "[0]<stdout>:token [MASKED]")
    # The log is saved: the MPIJob went, and every pod with it (kubernetes.keep_finished keeps it)
    # once the garbage collector has deleted them (a background deletion).
    wait_for("the job's pods gone", lambda: job.pods() == [])
    assert cluster.clock.sleeps == []


def test_workers_left_running_by_the_operator_go_with_the_mpijob(cluster: Cluster) -> None:
    """Scripted: what is tested is the garbage collector taking the workers with no pod delete
    (FaultProxy); the node only stands in."""
    job = cluster.started(mpijob_manifest(clean_pod_policy="None"))
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert cluster.leftovers() == []
    # The MPIJob's deletion took them: the CI job did not wait for each pod's.
    assert cluster.api.count("deletecollection", "pods") == 0
    assert cluster.api.count("delete", "pods") == 0


def test_workers_left_running_by_a_kept_job_are_stopped(cluster: Cluster) -> None:
    """Scripted: what is tested is the one deletecollection of the workers (FaultProxy); the node
    only stands in."""
    job = cluster.started(mpijob_manifest(clean_pod_policy="None"), keep_finished=3600)
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    wait_for("the workers gone", lambda: job.workers() == [], timeout=60)
    # One request for all of them; the MPIJob stays, marked to be deleted later.
    assert cluster.api.count("deletecollection", "pods") == 1
    assert cluster.api.count("delete", "pods") == 0


def test_launcher_exits_1(cluster: Cluster) -> None:
    """Scripted: on real nodes as test_a_training_command_that_exits_non_zero; here the exact CI-log
    lines and Failure, and the workers gone."""
    job = start_training(cluster)
    launcher = job.launcher_pod
    job.launcher_log("Traceback (most recent call last):", "ValueError: bad batch")
    job.launcher_exits(1)
    result = cluster.result()
    message = f"launcher {launcher} exited with code 1"
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        "Traceback (most recent call last):",
        "ValueError: bad batch",
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        DELETED,
    ]
    assert result.outcome is Outcome.FAILED
    assert result.failure == Failure(FailureKind.EXIT_CODE, message, exit_code=1, pod=launcher)
    assert result.exit_code == 1
    # Deleted in the background: the garbage collector removes the pods in its own time.
    wait_for("the workers gone", lambda: job.workers() == [])


def test_worker_oom_killed(cluster: Cluster) -> None:
    """Scripted: cgroup v2's group OOM kill (memory.oom.group) ends the whole worker; this host is
    cgroup v1 (its case on real nodes: test_a_rank_over_the_workers_memory_limit_is_named)."""
    job = start_training(cluster)
    job.worker_oom_killed(1)
    # The worker's end ends the steady run: the MPIJob is listed and watched again.
    cluster.api.wait_until(lambda: "mpijobs" in cluster.api.watching())
    # (one more, after submission, for the jobs whose ci-runner/delete-after has passed)
    assert cluster.api.count("list", "mpijobs") == 3
    job.launcher_log("[1]<stderr>:ORTE has lost communication with a remote daemon.")
    job.launcher_exits(1)
    result = cluster.result()
    # cgroup v2: the kubelet's memory.oom.group ends the whole worker container, 137.
    message = (
        f"worker {JOB}-worker-1 was OOMKilled (memory limit 4Gi): a rank went over the worker's "
        "memory limit and, on cgroup v2, the kernel ends the whole container (memory.oom.group), "
        "sshd and every rank in it; fix: raise resources.memory, or use less memory per rank "
        "(what ranks write to /dev/shm counts too)"
    )
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        "[1]<stderr>:ORTE has lost communication with a remote daemon.",
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        DELETED,
    ]
    assert result.failure == Failure(
        FailureKind.OOM_KILLED, message, exit_code=137, pod=f"{JOB}-worker-1"
    )
    # The one still running was stopped, then the MPIJob went with every pod (the garbage
    # collector and the kubelet in their own time).
    wait_for("the workers gone", lambda: job.workers() == [])
    assert cluster.api.count("watch", "mpijobs") == 2  # the Failed condition came this way


def test_validation_error_fails_at_once(cluster: Cluster) -> None:
    """Scripted: what is tested is the operator's validation; no pod is made."""
    cluster.start(mpijob_manifest(launcher_replicas=2))
    result = cluster.result()
    message = (
        "MPI Operator rejected the MPIJob: Found validation errors: "
        "spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1"
    )
    assert cluster.log.lines == [
        submitted(cluster),
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert result.failure == Failure(FailureKind.VALIDATION, message)
    assert cluster.leftovers() == []


DEADLINE = 12  # real seconds here


def test_deadline_exceeded(cluster: Cluster) -> None:
    """Scripted: what is tested is the Job controller's activeDeadlineSeconds; the node only stands
    in."""
    job = cluster.started(mpijob_manifest(deadline=DEADLINE))
    job.workers_running()
    cluster.log.wait_for("[ci-runner] workers ready 2/2")
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log(*LOG)
    cluster.log.wait_for(LOG[-1])
    lines = running_lines(cluster, job)
    job.deadline_exceeded()
    result = cluster.result()
    message = (
        f"the job ran past its time limit of {DEADLINE}s (activeDeadlineSeconds) and was stopped"
    )
    assert cluster.log.lines == [*lines, f"[ci-runner] MPIJob {JOB} failed: {message}", DELETED]
    assert result.failure == Failure(FailureKind.DEADLINE, message)
    wait_for("the job's pods gone", lambda: job.pods() == [])  # the garbage collector's


def test_watch_dropped_mid_run_resumes_without_relisting(cluster: Cluster) -> None:
    """Scripted: what is tested is FaultProxy's dropped watches and the back-off on the ManualClock;
    the node only stands in."""
    job = cluster.started()
    job.workers_running([0])
    cluster.log.wait_for("[ci-runner] workers ready 1/2")
    cluster.api.drop_watches()
    cluster.api.wait_until(
        lambda: (
            all(cluster.api.count("watch", r) == 2 for r in ("mpijobs", "pods", "events"))
            and cluster.watched() == ["mpijobs", "pods", "events"]
        )
    )
    job.workers_running([1])
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log(*LOG)
    job.launcher_exits(0)
    result = cluster.result()
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert result.outcome is Outcome.SUCCEEDED
    # Each watch came back from where it was (one backoff second each), without a new list.
    assert cluster.clock.sleeps == [1.0, 1.0, 1.0]
    assert cluster.api.count("list", "pods") == 2  # the first, and the final look
    assert cluster.api.count("watch", "pods") == 2


def test_410_gone_on_reconnect_lists_again(cluster: Cluster) -> None:
    """Scripted: what is tested is FaultProxy's 410 Gone on reconnect; the node only stands in."""
    job = cluster.started()
    job.workers_running([0])
    cluster.log.wait_for("[ci-runner] workers ready 1/2")
    cluster.api.expire_watches(times=3)
    cluster.api.drop_watches()
    cluster.api.wait_until(
        # (and one list of MPIJobs, after submission, for those whose time has passed)
        lambda: all(
            cluster.api.count("list", r) == n
            for r, n in (("mpijobs", 3), ("pods", 2), ("events", 2))
        )
    )
    job.workers_running([1])
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log(*LOG)
    cluster.wait_watching_pods_alone()
    job.launcher_exits(0)
    result = cluster.result()
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert result.outcome is Outcome.SUCCEEDED
    # First, after 410, and once for the jobs whose delete-after has passed; not when the
    # launcher ended: its pod Succeeded decided the job (its watch stayed paused).
    assert cluster.api.count("list", "mpijobs") == 3
    assert cluster.api.count("list", "events") == 2
    assert cluster.api.count("list", "pods") == 3  # first, after 410, the final look


def test_a_steady_job_has_its_pods_watched_alone(cluster: Cluster) -> None:
    """Scripted: what is tested is the requests FaultProxy counts; the node only stands in."""
    job = start_training(cluster)
    drop_every_watch(cluster)
    drop_every_watch(cluster)
    assert requests_made(cluster) == {
        "create mpijobs": 1,
        "create secrets": 1,
        "create configmaps": 1,
        "list mpijobs": 2,  # the job's, and those whose ci-runner/delete-after has passed
        "watch mpijobs": 1,
        "list pods": 1,
        "watch pods": 3,
        "list events": 1,
        "watch events": 1,
        "get pods/log": 1,
    }
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    # The launcher's pod Succeeded decided the job: the MPIJob was not listed or watched again
    # for the operator's Succeeded, which comes about a second later.
    assert cluster.api.count("list", "mpijobs") == 2
    assert cluster.api.count("watch", "mpijobs") == 1


def test_every_watch_dropped_again_and_again_costs_one_request_per_drop_while_steady(
    cluster: Cluster,
) -> None:
    """Scripted: what is tested is FaultProxy's dropped watches and its request counts; the node
    only stands in."""
    job = cluster.started()
    drop_every_watch(cluster)  # pending: all three come back
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log(*LOG)
    cluster.log.wait_for(LOG[-1])
    cluster.wait_watching_pods_alone()
    for _ in range(4):  # running: the pods watch alone comes back
        drop_every_watch(cluster)
    job.launcher_exits(0)
    result = cluster.result()
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    made = requests_made(cluster)
    # The workers, when the backend is done before the operator deleted them (cleanPodPolicy
    # Running): whoever comes first.
    assert made.pop("deletecollection pods", 0) in (0, 1)
    # watch mpijobs: at the start and after the drop while pending; not at the launcher's end
    # (its pod Succeeded decided the job before the operator wrote Succeeded).
    assert made == {
        "create mpijobs": 1,
        "create secrets": 1,
        "create configmaps": 1,
        "delete mpijobs": 1,  # the job is over and its log saved
        "delete secrets": 1,
        "list mpijobs": 2,  # at the start, kept jobs expired
        "watch mpijobs": 2,
        "list pods": 2,  # at the start, and the final look
        "watch pods": 6,
        "list events": 1,
        "watch events": 2,
        "get pods/log": 1,
        "get pods": 1,
    }


class Handling:
    """What run() does with watch updates: every update it applies (in order), and how many
    updates it has finished with (watches fitted)."""

    def __init__(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
        backend = cluster.backend_under_test
        assert backend is not None
        self.cond = cluster.api.cond  # so that api.wait_until wakes
        self.applied: list[tuple[str, str]] = []
        self.finished = 0
        apply, fit = backend._apply, backend._fit_watches

        def applied(update: WatchUpdate) -> None:
            with self.cond:
                self.applied.append((update.resource.plural, update.type))
            apply(update)

        def fitted() -> None:
            fit()
            with self.cond:
                self.finished += 1
                self.cond.notify_all()

        monkeypatch.setattr(backend, "_apply", applied)
        monkeypatch.setattr(backend, "_fit_watches", fitted)


def test_410_on_the_pods_watch_while_steady_does_not_resume_the_mpijob_watch(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripted: what is tested is FaultProxy's 410 Gone on the pods watch and the backend's
    handling of it; the node only stands in."""
    job = start_training(cluster)
    handling = Handling(cluster, monkeypatch)
    cluster.api.expire_watches(times=1)
    cluster.api.drop_watches()  # the reconnect gets 410 Gone: the pods are listed again
    cluster.api.wait_until(lambda: handling.finished == 1)
    # The same pods, still steady: the MPIJob was not listed (resumed) for it.
    assert handling.applied == [("pods", SYNC)]
    assert cluster.api.count("list", "pods") == 2
    assert cluster.api.count("list", "mpijobs") == 2  # the job's; those whose time has passed
    job.launcher_exits(0)
    result = cluster.result()
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert cluster.api.count("watch", "pods") == 3  # first, 410 Gone, after the new list
    # Not listed again when the launcher ended: its pod Succeeded decided the job.
    assert cluster.api.count("list", "mpijobs") == 2
    assert cluster.api.count("watch", "mpijobs") == 1
    assert cluster.api.count("list", "events") == 1


def test_burst_of_500s_is_retried_with_exponential_backoff(cluster: Cluster) -> None:
    """Scripted: what is tested is FaultProxy's 500s and the back-off on the ManualClock; the node
    only stands in."""
    cluster.api.fail_next(500, times=3, verb="create", resource="secrets")
    job = start_training(cluster)
    job.launcher_exits(0)
    result = cluster.result()
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.clock.sleeps == [1.0, 2.0, 4.0]
    assert cluster.api.count("create", "secrets") == 4
    assert cluster.log.lines == [
        *running_lines(cluster, job),
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]


def test_429_waits_as_long_as_retry_after_says(cluster: Cluster) -> None:
    """Scripted: what is tested is FaultProxy's 429s and their Retry-After on the ManualClock; the
    node only stands in."""
    cluster.api.fail_next(429, times=2, retry_after=7, verb="create", resource="mpijobs")
    job = start_training(cluster)
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert cluster.clock.sleeps == [7.0, 7.0]
    assert cluster.api.count("create", "mpijobs") == 3


def test_log_stream_dropped_mid_line_loses_and_repeats_nothing(cluster: Cluster) -> None:
    """Scripted: the kubelet's log stream breaks inside the third of three equally stamped lines,
    which a real kubelet does not do on cue."""
    job = start_training(cluster)
    # Three lines with one timestamp, the stream breaking inside the third: on reconnect the
    # server sends all three again (sinceTime has whole seconds) and the first two are skipped.
    job.launcher_log("[0]<stdout>:step 1", "[1]<stdout>:step 1", same_time=True)
    job.launcher_log_cut("[0]<stdout>:step 2 loss 0.25", same_time=True)
    job.launcher_log("[1]<stdout>:step 2 loss 0.26")
    job.launcher_exits(0)
    result = cluster.result()
    lines = [
        *LOG,
        "[0]<stdout>:step 1",
        "[1]<stdout>:step 1",
        "[0]<stdout>:step 2 loss 0.25",
        "[1]<stdout>:step 2 loss 0.26",
    ]
    assert cluster.log.lines == [
        *running_lines(cluster, job)[:-2],
        *lines,
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert result.log_path.read_text() == "\n".join(lines) + "\n"
    assert cluster.api.count("get", "pods/log") == 2


def test_cancel_mid_run_deletes_every_pod_and_the_secret(cluster: Cluster) -> None:
    """Scripted: on real nodes as
    test_a_cancelled_or_timed_out_job_leaves_no_pod_and_no_process[canceled]; here the in-process
    cancel(), its exact lines and one deletecollection (FaultProxy)."""
    job = start_training(cluster)
    lines = running_lines(cluster, job)
    assert cluster.backend_under_test is not None
    cluster.backend_under_test.cancel()
    result = cluster.result()
    assert cluster.log.lines == [
        *lines,
        f"[ci-runner] cancelling: deleting MPIJob {JOB}, its pods and its Secret",
        f"[ci-runner] MPIJob {JOB} cancelled",
    ]
    assert result.outcome is Outcome.CANCELLED
    assert result.failure == Failure(FailureKind.CANCELLED, "cancelled before the job finished")
    assert result.exit_code == 1
    assert cluster.leftovers() == []
    # Every pod of the job in one request, none one by one.
    assert cluster.api.count("deletecollection", "pods") == 1
    assert cluster.api.count("delete", "pods") == 0


def test_cancel_twice_is_harmless(cluster: Cluster) -> None:
    """Scripted: what is tested is that cancel is idempotent; no pod runs."""
    cluster.started()
    assert cluster.backend_under_test is not None
    cluster.backend_under_test.cancel()
    cluster.backend_under_test.cancel()
    assert cluster.result().outcome is Outcome.CANCELLED
    assert cluster.leftovers() == []


def delete_mpijob(cluster: Cluster, propagation: str) -> None:
    path = MPIJOBS.format(ns=cluster.namespace) + f"/{JOB}"
    cluster.admin.delete(path, {"propagationPolicy": propagation})


def test_job_deleted_by_someone_else(cluster: Cluster) -> None:
    """Scripted: what is tested is a background deletion, the garbage collector and the watch; the
    node only stands in."""
    job = start_training(cluster)
    lines = running_lines(cluster, job)
    delete_mpijob(cluster, "Background")  # kubectl delete's
    result = cluster.result()
    message = f"MPIJob {JOB} was deleted before it finished"
    assert cluster.log.lines == [*lines, f"[ci-runner] {message}"]
    assert result.outcome is Outcome.CANCELLED
    assert result.failure == Failure(FailureKind.CANCELLED, message)
    assert cluster.leftovers() == []
    # Its watch was paused: the garbage collector deleting the pods sent us to list it again
    # (and once, after submission, for the jobs whose ci-runner/delete-after has passed).
    assert cluster.api.count("list", "mpijobs") == 3
    assert cluster.api.count("watch", "mpijobs") == 1


def test_attach_to_a_job_submitted_by_an_earlier_run(cluster: Cluster) -> None:
    """Scripted: what is tested is the attach and the Secret's refresh; the node only stands in."""
    secrets_path = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    cluster.admin.create(secrets_path, {"metadata": {"name": f"{JOB}-secrets"}, "data": {}})
    created = cluster.admin.create(MPIJOBS.format(ns=cluster.namespace), mpijob_manifest())
    assert created is not None
    uid = created["metadata"]["uid"]
    secrets: list[JSON] = []  # as this run left the Secret before the end deleted it
    informer = Informer(
        cluster.admin,
        secrets_path,
        {"fieldSelector": f"metadata.name={JOB}-secrets"},
        lambda kind, obj: secrets.append(obj) if kind != "DELETED" else None,
        f"secrets-{cluster.namespace}",
    ).start()
    try:
        job = cluster.job()
        job.workers_running()
        job.launcher_running()
        job.launcher_log(*LOG)
        cluster.start()
        cluster.log.wait_for(LOG[-1])
        job.launcher_exits(0)
        result = cluster.result()
    finally:
        informer.stop()
    assert cluster.log.lines == [
        f"[ci-runner] attached to MPIJob {JOB} in namespace {cluster.namespace}: it was already "
        "submitted (the CI job restarted)",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {job.launcher_pod})",
        *LOG,
        f"[ci-runner] MPIJob {JOB} succeeded",
        DELETED,
    ]
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.api.count("create", "mpijobs") == 1
    secret = secrets[-1]  # the last change before its deletion
    assert [ref["uid"] for ref in secret["metadata"]["ownerReferences"]] == [uid]
    assert secret["data"] == {"git-token": "Z2xjYnQtNjQtc2VjcmV0LWpvYi10b2tlbg=="}


def test_403_names_the_verb_resource_and_rbac_rule(cluster: Cluster) -> None:
    """Scripted: what is tested is RBAC's 403 at kube-apiserver; no pod is made."""
    cluster.forbid("create", "mpijobs")
    cluster.start()
    error = cluster.error()
    assert isinstance(error, ClusterError)
    ns = cluster.namespace
    assert str(error) == (
        f"Kubernetes refused to create mpijobs.kubeflow.org in namespace {ns} (403 Forbidden: "
        f'mpijobs.kubeflow.org is forbidden: User "system:serviceaccount:{ns}:ci-runner" cannot '
        f'create resource "mpijobs" in API group "kubeflow.org" in the namespace "{ns}"); fix: '
        "add the "
        'RBAC rule {apiGroups: ["kubeflow.org"], resources: ["mpijobs"], verbs: ["create"]} to '
        "the Role bound to the CI job's identity (examples/rbac.yaml grants everything "
        "ci-runner needs)"
    )


def test_403_on_the_log_names_the_subresource(cluster: Cluster) -> None:
    """Scripted: what is tested is RBAC refusing pods/log at kube-apiserver; the node only stands
    in."""
    cluster.forbid("get", "pods/log")
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    error = cluster.error()
    assert isinstance(error, ClusterError)
    assert 'fix: add the RBAC rule {apiGroups: [""], resources: ["pods/log"], verbs: ["get"]}' in (
        str(error)
    )


def test_401_is_one_line(cluster: Cluster) -> None:
    """Scripted: what is tested is kube-apiserver's 401; no request gets further."""
    cluster.start(token="not-a-token-kube-apiserver-knows")
    error = cluster.error()
    assert isinstance(error, ClusterError)
    assert str(error) == (
        "Kubernetes rejected ci-runner's credentials (401 Unauthorized) when trying to create "
        f"mpijobs.kubeflow.org in namespace {cluster.namespace}; fix: renew the token or client "
        "certificate in KUBECONFIG (or the service account token) — it is missing, wrong or "
        "expired"
    )
    assert cluster.log.lines == []


def test_invalid_manifest_is_refused_with_the_api_servers_422(cluster: Cluster) -> None:
    """Scripted: what is tested is the CRD's validation at kube-apiserver; no pod is made."""
    manifest = mpijob_manifest()
    manifest["spec"]["slotsPerWorker"] = "two"
    cluster.start(manifest)
    error = cluster.error()
    assert isinstance(error, ClusterError)
    assert str(error) == (
        "Kubernetes rejected the request to create mpijobs.kubeflow.org in namespace "
        f'{cluster.namespace} as invalid: MPIJob.kubeflow.org "{JOB}" is invalid: '
        'spec.slotsPerWorker: Invalid value: "string": spec.slotsPerWorker in body must be of '
        'type integer: "string"'
    )


def test_a_manifest_from_render_runs(cluster: Cluster) -> None:
    """Scripted: on real nodes every e2e runs a rendered manifest
    (test_the_example_trains_on_two_workers_over_ssh_between_pods); here its first and last CI-log
    lines."""
    config = TrainConfig(
        name="simple-ml", image="horovod/horovod:0.28.1", command=("python", "train.py"), workers=2
    )
    context = CIContext(
        sha="0123456789abcdef0123456789abcdef01234567",
        project_path="group/project",
        job_id="5005",
        repo_url="https://gitlab.example.com/group/project.git",
    )
    manifest = render_mpijob(trusted_plan(config, context))
    name = manifest["metadata"]["name"]
    job = cluster.started(manifest)
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log("[0]<stdout>:hello")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert cluster.log.lines[0] == (
        f"[ci-runner] submitted MPIJob {name} in namespace {cluster.namespace}"
    )
    assert cluster.log.lines[-2:] == [
        f"[ci-runner] MPIJob {name} succeeded",
        f"[ci-runner] deleted MPIJob {name}, its pods and its Secret",
    ]


def test_cancel_from_a_signal_handler_while_run_waits(cluster: Cluster) -> None:
    """Scripted: what is tested is cancel from a signal handler in this process; the node only
    stands in."""
    backend = cluster.backend()
    previous = signal.signal(signal.SIGUSR1, lambda _signum, _frame: backend.cancel())

    def play() -> None:
        job = cluster.job()
        cluster.wait_watching()
        job.workers_running()
        cluster.log.wait_for("[ci-runner] workers ready 2/2")
        os.kill(os.getpid(), signal.SIGUSR1)

    driver = threading.Thread(target=play, daemon=True)
    driver.start()
    try:
        result = backend.run()  # on the main thread, where Python runs signal handlers
    finally:
        signal.signal(signal.SIGUSR1, previous)
    driver.join(timeout=20)
    assert result.outcome is Outcome.CANCELLED
    assert cluster.log.lines[-2:] == [
        f"[ci-runner] cancelling: deleting MPIJob {JOB}, its pods and its Secret",
        f"[ci-runner] MPIJob {JOB} cancelled",
    ]
    assert cluster.leftovers() == []
