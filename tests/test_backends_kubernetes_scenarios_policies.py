"""What a shared cluster's policies do to a run, on the scripted cluster (the real kube-apiserver,
controllers, scheduler and MPI Operator v0.8.2; the test plays the nodes' part): ResourceQuotas
(cpu/memory, GPUs, pod counts) on the MPIJob ci-runner renders, a job created suspended by a queue
and one suspended after it started, a worker evicted through the Eviction API, and a retried CI job
that attaches to a job whose workers were unschedulable for a while (the FailedScheduling Events
its listing replays). Each asserts the exact lines ci-runner prints (issue 24).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.config.types import ContainerResources, OnPreemption, Resources
from ci_runner.plan.run_plan import JobSecret, secret_name
from ci_runner.render import render_mpijob
from testing.backend_harness import Cluster, submitted, succeeded
from testing.control_plane.rbac import OPERATOR_USER
from testing.kube_api import Informer
from testing.mpijob_manifests import JOB, JSON, mpijob_manifest
from testing.plan_cases import CONFIG, CONTEXT, trusted_plan
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario
from testing.waiting import wait_for

pytestmark = pytest.mark.control_plane

SETTLE = 30.0
NONE = ContainerResources()
# A namespace's quota on every cpu/memory resource (shared ML namespaces have one).
COMPUTE = {
    "requests.cpu": "16",
    "requests.memory": "64Gi",
    "limits.cpu": "16",
    "limits.memory": "64Gi",
}
QUEUE = "kueue.x-k8s.io/queue-name"


def rendered(
    setup: ContainerResources | None = None,
    launcher: ContainerResources | None = None,
    run_as_user: int | None = None,
) -> JSON:
    """The MPIJob ci-runner renders for the plan tests' train.yaml with ``resources.cpu: 2`` and
    ``resources.memory: 4Gi`` (and ``resources.setup`` / ``resources.launcher`` when given;
    ``kubernetes.run_as_user`` with ``ssh_port: 2222``)."""
    resources = Resources(cpu="2", memory="4Gi")
    if setup is not None:
        resources = replace(resources, setup=setup)
    if launcher is not None:
        resources = replace(resources, launcher=launcher)
    config = replace(CONFIG, resources=resources)
    if run_as_user is not None:
        k8s = replace(config.kubernetes, run_as_user=run_as_user, ssh_port=2222)
        config = replace(config, kubernetes=k8s)
    return render_mpijob(trusted_plan(config, CONTEXT))


def refused_launcher(failure: Failure | None, name: str) -> str:
    """The launcher pod the Job controller tried to create (its name has a random suffix)."""
    assert failure is not None
    found = re.search(rf'pods "({re.escape(name)}-launcher-[a-z0-9]{{5}})"', failure.message)
    assert found, failure.message
    return found[1]


# -- quotas ----------------------------------------------------------------------------------


def test_a_compute_quota_refuses_setup_containers_rendered_without_resources(
    cluster: Cluster,
) -> None:
    """Scripted: what is tested is quota admission refusing the worker pods, which never reach a
    node; on real nodes as
    test_resources_none_in_a_quota_namespace_without_defaults_is_refused_in_one_line, here with the
    fix naming resources.setup alone."""
    cluster.quota("compute", COMPUTE)
    setup = "fetch-code,install-requirements"
    workers_refused(
        cluster,
        rendered(setup=NONE, launcher=NONE),
        f"compute: must specify limits.cpu for: {setup}; limits.memory for: {setup}; "
        f"requests.cpu for: {setup}; requests.memory for: {setup}",
        "resources.setup",
    )


def workers_refused(cluster: Cluster, manifest: JSON, quota: str, fix: str) -> None:
    """Run ``manifest``: the operator's worker pod is refused by the quota (``NAME: must
    specify ...``); ci-runner says so, naming ``fix``, and leaves nothing."""
    worker_refused(
        cluster,
        manifest,
        f"failed quota: {quota}; fix: the namespace's ResourceQuota counts cpu and memory, so "
        f"every container must declare them: set {fix} in train.yaml",
    )


def worker_refused(cluster: Cluster, manifest: JSON, why: str) -> None:
    """Run ``manifest``: admission refuses the operator's first worker pod (``forbidden: why``);
    ci-runner says so in one line and leaves nothing."""
    name = manifest["metadata"]["name"]
    cluster.start(manifest)
    result = cluster.result(timeout=SETTLE)
    message = (
        "MPI Operator cannot create the job's pods: worker pod created failed: "
        f'pods "{name}-worker-0" is forbidden: {why}'
    )
    assert result.failure == Failure(FailureKind.REFUSED, message), result.failure
    assert cluster.log.lines == [
        submitted(cluster, name),
        f"[ci-runner] MPIJob {name} failed: {message}",
        f"[ci-runner] deleted MPIJob {name} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []


def test_a_compute_quota_refuses_a_launcher_rendered_without_resources(cluster: Cluster) -> None:
    """Scripted: what is tested is quota admission of the launcher once the workers are Ready; the
    workers' node only stands in."""
    cluster.quota("compute", COMPUTE)
    manifest = rendered(launcher=NONE)
    name = manifest["metadata"]["name"]
    job = cluster.started(manifest)
    job.workers_running()
    result = cluster.result(timeout=SETTLE)
    launcher = refused_launcher(result.failure, name)
    resources = ["limits.cpu", "limits.memory", "requests.cpu", "requests.memory"]
    message = (
        "the launcher Job cannot create the launcher's pod: Error creating: "
        f'pods "{launcher}" is forbidden: failed quota: compute: must specify '
        + "; ".join(f"{r} for: launcher" for r in resources)
        + "; fix: the namespace's ResourceQuota counts cpu and memory, so every container must "
        "declare them: set resources.launcher in train.yaml"
    )
    assert result.failure == Failure(FailureKind.REFUSED, message)
    assert cluster.log.lines == [
        submitted(cluster, name),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] MPIJob {name} failed: {message}",
        f"[ci-runner] deleted MPIJob {name} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []


def test_a_compute_quota_admits_the_default_rendering_and_it_trains(cluster: Cluster) -> None:
    """Scripted: on real nodes as test_a_namespace_with_a_cpu_and_memory_quota_trains_the_example;
    here the exact CI-log lines."""
    cluster.quota("compute", COMPUTE)
    trains(cluster, rendered())


# -- PodSecurity -----------------------------------------------------------------------------

ENFORCE = "pod-security.kubernetes.io/enforce"


def test_a_namespace_enforcing_baseline_admits_the_root_image_and_it_trains(
    cluster: Cluster,
) -> None:
    """Scripted: on real nodes as
    test_a_namespace_enforcing_baseline_trains_the_stock_image_with_root_workers; here the exact
    CI-log lines."""
    cluster.label_namespace({ENFORCE: "baseline"})
    trains(cluster, rendered())


def test_a_namespace_enforcing_restricted_admits_a_non_root_image_and_it_trains(
    cluster: Cluster,
) -> None:
    """Scripted: on real nodes as
    test_a_namespace_enforcing_restricted_trains_the_non_root_image_as_its_user; here the exact
    CI-log lines."""
    cluster.label_namespace({ENFORCE: "restricted"})
    trains(cluster, rendered(run_as_user=1000))


def test_a_namespace_enforcing_restricted_refuses_root_workers_naming_the_level(
    cluster: Cluster,
) -> None:
    """Scripted: what is tested is PodSecurity admission refusing the workers; no pod reaches a
    node."""
    cluster.label_namespace({ENFORCE: "restricted"})
    worker_refused(
        cluster,
        rendered(),
        'violates PodSecurity "restricted:latest": unrestricted capabilities (container "worker" '
        'must not include "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", '
        '"SETUID", "SYS_CHROOT" in securityContext.capabilities.add), runAsNonRoot != true '
        '(container "worker" must not set securityContext.runAsNonRoot=false), runAsUser=0 '
        '(container "worker" must not set runAsUser=0); fix: namespace '
        f"{cluster.namespace} enforces PodSecurity restricted (label "
        "pod-security.kubernetes.io/enforce), which a worker meets only as a non-root user: set "
        "kubernetes.run_as_user to the image's non-root uid and kubernetes.ssh_port to 1024 or "
        "more, or have the namespace labelled pod-security.kubernetes.io/enforce=baseline",
    )


def trains(cluster: Cluster, manifest: JSON) -> None:
    """Run ``manifest`` to the launcher's exit 0: it succeeds and leaves nothing."""
    name = manifest["metadata"]["name"]
    job = cluster.started(manifest)
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)
    assert cluster.result(timeout=SETTLE).outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        submitted(cluster, name),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {job.launcher_pod})",
        *succeeded(name),
    ]
    assert cluster.leftovers(SETTLE) == []


def test_a_memory_limit_quota_refuses_workers_that_declare_no_memory(cluster: Cluster) -> None:
    """Scripted: what is tested is quota admission refusing the worker pods, which never reach a
    node; on real nodes as
    test_resources_none_in_a_quota_namespace_without_defaults_is_refused_in_one_line, here the
    memory-only wording and its fix."""
    cluster.quota("memory", {"limits.memory": "64Gi"})
    workers_refused(
        cluster,
        render_mpijob(trusted_plan(replace(CONFIG, resources=Resources()), CONTEXT)),
        "memory: must specify limits.memory for: worker",
        "resources.cpu and resources.memory",
    )


def test_a_gpu_quota_admits_workers_that_declare_no_cpu_or_memory(cluster: Cluster) -> None:
    """Scripted: what is tested is a GPU quota's admission of workers that declare no cpu or memory;
    the node only stands in."""
    cluster.quota("gpus", {"requests.nvidia.com/gpu": "4"})
    trains(cluster, render_mpijob(trusted_plan(replace(CONFIG, resources=Resources()), CONTEXT)))


def test_a_pod_count_quota_that_leaves_no_room_for_the_launcher_fails_at_once(
    cluster: Cluster,
) -> None:
    """Scripted: what is tested is a pod-count quota refusing the launcher; the workers' node only
    stands in."""
    cluster.quota("pods", {"pods": "2"})
    job = cluster.started(mpijob_manifest(wait_for_workers=True))
    job.workers_running()
    result = cluster.result(timeout=SETTLE)  # the ManualClock never moved: no setup_timeout
    launcher = refused_launcher(result.failure, JOB)
    message = (
        "the launcher Job cannot create the launcher's pod: Error creating: "
        f'pods "{launcher}" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, '
        f"limited: pods=2; fix: a ResourceQuota in namespace {cluster.namespace} is used up: wait "
        "for other jobs to finish, ask for less (workers, resources), or have the quota raised"
    )
    assert result.failure == Failure(FailureKind.REFUSED, message)
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []


# -- unschedulable workers, and a retried CI job's listing -------------------------------------


def _gpus(manifest: JSON, gpus: int) -> JSON:
    """``manifest`` with workers that each need ``gpus`` GPUs (a node has 4)."""
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return manifest


# kube-scheduler 1.35's text for a worker no node can hold (5 GPUs; each node has 4).
UNSCHEDULABLE = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)


@pytest.fixture
def room(cluster: Cluster) -> Iterator[None]:
    """node-1 gets back its 4 GPUs after the test (the nodes are the module's)."""
    yield
    cluster.kubelet.set_gpus("node-1", 4)


def _failed_scheduling(cluster: Cluster, pod: str) -> list[JSON]:
    events, _ = cluster.admin.list(
        f"/api/v1/namespaces/{cluster.namespace}/events",
        {"fieldSelector": f"involvedObject.name={pod},reason=FailedScheduling"},
    )
    return events


def test_workers_unschedulable_past_the_timeout_fail_the_job(cluster: Cluster) -> None:
    """Scripted: on real nodes as test_a_gpu_no_node_has_fails_after_unschedulable_timeout; here
    exactly 600 s on the ManualClock and the exact CI-log lines."""
    job = cluster.started(_gpus(mpijob_manifest(), 5), unschedulable_timeout=600)
    message = job.workers_unschedulable()
    cluster.log.wait_for(f"[ci-runner] workers pending: {message}")
    cluster.clock.advance(600)
    result = cluster.result()
    failure = f"pod {JOB}-worker-0 stayed unschedulable for 600s: {UNSCHEDULABLE}"
    assert result.failure == Failure(FailureKind.UNSCHEDULABLE, failure, pod=f"{JOB}-worker-0")
    assert cluster.log.lines == [
        submitted(cluster),
        f"[ci-runner] workers pending: {UNSCHEDULABLE}",
        f"[ci-runner] MPIJob {JOB} failed: {failure}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []


def test_a_retried_ci_job_ignores_the_failed_scheduling_events_its_listing_replays(
    cluster: Cluster, room: None
) -> None:
    # The first CI job submitted the job and was killed while its workers waited for a node.
    """Scripted: what is tested is how ci-runner treats the FailedScheduling Events its listing
    replays, under the ManualClock; the node only stands in."""
    manifest = _gpus(mpijob_manifest(), 5)
    api = KubeApi(cluster.api_client(), cluster.namespace, cluster.clock)
    submit(api, manifest, JobSecret(secret_name(JOB), ("git-token",), {"git-token": "t"}), None)
    job = cluster.job()
    job.workers_unschedulable()
    cluster.kubelet.set_gpus("node-1", 10)
    job.workers_running()
    assert _failed_scheduling(cluster, f"{JOB}-worker-0")  # what the retry's listing brings
    # The retried CI job attaches; its Events listing has the scheduler's old FailedScheduling.
    job = cluster.started(manifest, unschedulable_timeout=600)
    cluster.log.wait_for("[ci-runner] workers ready 2/2")
    cluster.clock.advance(900)  # an unschedulable timer started by those would fail the job
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)  # the pod updates that follow run the timers with the clock moved
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        f"[ci-runner] attached to MPIJob {JOB} in namespace {cluster.namespace}: it was already "
        "submitted (the CI job restarted)",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {job.launcher_pod})",
        *succeeded(),
    ]


# -- queues: suspended before the start, and after it ----------------------------------------


def _queued(manifest: JSON, suspend: bool) -> JSON:
    manifest["metadata"]["labels"][QUEUE] = "team-a"
    manifest["spec"]["runPolicy"]["suspend"] = suspend
    return manifest


def _suspend(cluster: Cluster, suspend: bool) -> None:
    """What the queue's controller does: the MPIJob's runPolicy.suspend."""
    cluster.admin.merge_patch(
        MPIJOBS.format(ns=cluster.namespace) + f"/{JOB}",
        {"spec": {"runPolicy": {"suspend": suspend}}},
    )


QUEUED = (
    f"[ci-runner] queued: MPIJob {JOB} is suspended (Kueue LocalQueue team-a); it starts when "
    "the queue admits it (kubernetes.setup_timeout does not run meanwhile)"
)
PREEMPTED = (
    f"[ci-runner] preempted: MPIJob {JOB} was suspended after it started (Kueue LocalQueue "
    "team-a); its pods are deleted and it starts again when the queue resumes it "
    "(kubernetes.on_preemption: fail ends the run instead)"
)
RESUMED = f"[ci-runner] resumed: the queue admitted MPIJob {JOB}; setting up"


def _runs_to_success(cluster: Cluster, job: JobScenario) -> str:
    job.workers_running()
    job.launcher_running()
    launcher = job.launcher_pod
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {launcher})")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    return launcher


def test_a_job_a_queue_created_suspended_waits_without_the_setup_timer(cluster: Cluster) -> None:
    """Scripted: what is tested is the operator's suspend and the setup timer under the ManualClock;
    the node only stands in."""
    job = cluster.started(_queued(mpijob_manifest(wait_for_workers=True), suspend=True))
    cluster.log.wait_for(QUEUED)
    assert job.pods() == []  # the operator creates nothing for a suspended job
    cluster.clock.advance(2 * 1800)  # twice kubernetes.setup_timeout
    # An update of the job, taken (and the timers run) before the resumption that follows it.
    cluster.admin.merge_patch(
        MPIJOBS.format(ns=cluster.namespace) + f"/{JOB}",
        {"metadata": {"annotations": {"kueue.x-k8s.io/workload": "mpijob-train-3f2a9c1"}}},
    )
    _suspend(cluster, False)
    cluster.log.wait_for(RESUMED)
    launcher = _runs_to_success(cluster, job)
    assert cluster.log.lines == [
        submitted(cluster),
        QUEUED,
        RESUMED,
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {launcher})",
        *succeeded(),
    ]
    assert cluster.leftovers(SETTLE) == []


@contextmanager
def _operator_may_update_job_status(cluster: Cluster) -> Iterator[None]:
    """The rule MPI Operator v0.8.2's own ClusterRole lacks (deploy/v2beta1/mpi-operator.yaml
    grants jobs create/list/update/watch only) while its controller clears the launcher Job's
    status.startTime through jobs/status before resuming it (mpi_job_controller.go, the
    UpdateStatus before unsuspending): granted in the test's namespace, removed after."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{cluster.namespace}"
    name = "mpi-operator-job-status"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["update"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
        ],
    }
    cluster.admin.create(f"{rbac}/roles", role)
    cluster.admin.create(f"{rbac}/rolebindings", binding)
    try:
        yield
    finally:
        cluster.admin.delete(f"{rbac}/rolebindings/{name}")
        cluster.admin.delete(f"{rbac}/roles/{name}")


def test_a_job_suspended_after_it_started_is_preempted_then_resumed(cluster: Cluster) -> None:
    """Scripted: what is tested is the operator's suspend and resume (with the RBAC rule it needs);
    the node only stands in."""
    with _operator_may_update_job_status(cluster):
        _preempted_then_resumed(cluster)
    assert cluster.leftovers(SETTLE) == []


def _preempted_then_resumed(cluster: Cluster) -> None:
    first = _started_and_running(cluster)
    job = cluster.job()
    _preempt(cluster, job)
    cluster.clock.advance(2 * 1800)
    _suspend(cluster, False)
    cluster.log.wait_for(RESUMED)
    second = _runs_to_success(cluster, job)
    assert second != first
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {first})",
        PREEMPTED,
        RESUMED,
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {second})",
        *succeeded(),
    ]


def _started_and_running(cluster: Cluster, on_preemption: OnPreemption = "wait") -> str:
    """A job a queue admitted, its workers Ready and its launcher running: the launcher pod."""
    job = cluster.started(
        _queued(mpijob_manifest(wait_for_workers=True), suspend=False),
        on_preemption=on_preemption,
    )
    job.workers_running()
    job.launcher_running()
    launcher = job.launcher_pod
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {launcher})")
    return launcher


def test_a_preemption_ends_the_run_when_train_yaml_says_fail(cluster: Cluster) -> None:
    """Scripted: what is tested is the operator's suspend and on_preemption: fail; the node only
    stands in."""
    launcher = _started_and_running(cluster, on_preemption="fail")
    _suspend(cluster, True)
    result = cluster.result()
    failure = (
        f"MPIJob {JOB} was preempted (Kueue LocalQueue team-a): suspended after it started, and "
        "kubernetes.on_preemption is fail (wait keeps the run waiting for the queue to resume "
        "it)"
    )
    assert result.outcome is Outcome.FAILED
    assert result.failure == Failure(FailureKind.PREEMPTED, failure)
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {launcher})",
        f"[ci-runner] MPIJob {JOB} failed: {failure}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []  # the queue has nothing left to resume


def _preempt(cluster: Cluster, job: JobScenario) -> None:
    """A queue suspends the running job; returns once the operator has settled it: ci-runner
    said so, the pods are gone and the operator wrote its Suspended condition (it writes it
    after it deletes the pods; a resume before that makes its status update conflict)."""
    _suspend(cluster, True)
    cluster.log.wait_for(PREEMPTED)
    wait_for("the preempted job's pods gone", lambda: job.pods() == [])
    wait_for(
        "the operator's Suspended condition",
        lambda: _suspended(job) == [("True", "MPIJobSuspended")],
    )


def _suspended(job: JobScenario) -> list[tuple[str, str]]:
    """The status and reason of the MPIJob's Suspended condition, if it has one."""
    conditions = job.mpijob.get("status", {}).get("conditions", [])
    return [(c["status"], c["reason"]) for c in conditions if c["type"] == "Suspended"]


def test_a_resume_the_operator_cannot_carry_out_fails_after_the_setup_timeout(
    cluster: Cluster,
) -> None:
    # Upstream v0.8.2's ClusterRole as it is: no update on jobs/status.
    """Scripted: what is tested is the operator's missing jobs/status rule and the setup timer under
    the ManualClock; the node only stands in."""
    first = _started_and_running(cluster)
    job = cluster.job()
    _preempt(cluster, job)
    _suspend(cluster, False)
    cluster.log.wait_for(RESUMED)
    job.workers_running()  # the operator makes the workers again; they get Ready
    ready = "[ci-runner] workers ready 2/2"
    wait_for("every worker Ready again", lambda: cluster.log.lines.count(ready) == 2)
    # What the real operator leaves: its sync stops at the launcher Job's jobs/status update,
    # before the MPIJob's status, so the Suspended condition stays True; no launcher pod.
    assert _suspended(job) == [("True", "MPIJobSuspended")]
    assert job.mpijob["spec"]["runPolicy"]["suspend"] is False
    cluster.clock.advance(1800)  # kubernetes.setup_timeout after the resume
    result = cluster.result()
    failure = (
        "every worker is Ready but no launcher started within 1800s of setup after the resume "
        f"(kubernetes.setup_timeout): MPIJob {JOB} still has the condition Suspended=True while "
        "its spec.runPolicy.suspend is false, so MPI Operator has not resumed its launcher Job "
        "(it must update the Job's status first); fix: add update on jobs/status (API group "
        "batch) to the MPI Operator's ClusterRole"
    )
    assert result.failure == Failure(FailureKind.SETUP, failure)
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {first})",
        PREEMPTED,
        RESUMED,
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] MPIJob {JOB} failed: {failure}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert cluster.leftovers(SETTLE) == []


# -- disruptions -----------------------------------------------------------------------------


def test_a_worker_evicted_through_the_eviction_api_is_named(cluster: Cluster) -> None:
    """Scripted: on real nodes as test_an_evicted_worker_is_named_with_its_disruption_target; here
    the exact CI-log lines, the evicted pod's last state and the operator's last replicaStatuses."""
    statuses = cluster.mpijob_statuses()
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    worker = job.kubelet.pod(cluster.namespace, f"{JOB}-worker-1")
    with _pod_states(cluster, worker["metadata"]["uid"]) as states:
        job.worker_evicted(1)
    evicted = states[-1:]
    job.launcher_log(CLOSED)
    job.launcher_exits(1)
    result = cluster.result()
    message = (
        f"worker {JOB}-worker-1 was stopped by the cluster (EvictionByEvictionAPI: Eviction API: "
        "evicting); the launcher then failed"
    )
    assert result.failure == Failure(FailureKind.WORKER_FAILED, message, pod=f"{JOB}-worker-1")
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {job.launcher_pod})",
        CLOSED,
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        f"[ci-runner] deleted MPIJob {JOB}, its pods and its Secret",
    ]
    # What the cluster did: the evicted worker ended Succeeded with the condition kept, and
    # the operator made a new worker-1 at once; the job failed only through the launcher.
    assert [(p["status"]["phase"], _disruption(p)) for p in evicted] == [
        ("Succeeded", ("EvictionByEvictionAPI", "Eviction API: evicting"))
    ]
    # The test's watch of the MPIJob may lag the backend's: wait for it to deliver that status.
    final = {"Launcher": {"failed": 1}, "Worker": {}}
    wait_for(
        "the MPIJob's last status", lambda: statuses and statuses[-1]["replicaStatuses"] == final
    )
    assert cluster.leftovers(SETTLE) == []


@contextmanager
def _pod_states(cluster: Cluster, uid: str) -> Iterator[list[JSON]]:
    """Every state the pod ``uid`` goes through meanwhile, to its deletion (a watch of the
    test's; the block's end waits for the watch to deliver the DELETED event, which may come
    after a listing saw the pod gone)."""
    states: list[JSON] = []
    deleted = threading.Event()

    def seen(kind: str, pod: JSON) -> None:
        if pod["metadata"]["uid"] == uid:
            states.append(pod)
            if kind == "DELETED":
                deleted.set()

    path = f"/api/v1/namespaces/{cluster.namespace}/pods"
    informer = Informer(cluster.admin, path, {}, seen, f"evicted-{cluster.namespace}").start()
    try:
        assert informer.synced.wait(SETTLE)
        yield states
        assert deleted.wait(SETTLE), f"the watch never saw pod {uid} deleted: {len(states)} states"
    finally:
        informer.stop()


CLOSED = f"[1]<stderr>:Connection to {JOB}-worker-1 closed by remote host."


def _disruption(pod: JSON) -> tuple[str, str] | None:
    for cond in pod["status"].get("conditions") or []:
        if cond["type"] == "DisruptionTarget" and cond["status"] == "True":
            return cond["reason"], cond["message"]
    return None
