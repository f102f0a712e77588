"""How a run fails or recovers on a real cluster (pods that fail, never get ready or are refused;
logs across a dropped stream; what is left behind), on the scripted cluster: the real
kube-apiserver, controllers, scheduler and MPI Operator v0.8.2, with the test playing the nodes'
part through the scripted kubelet (testing/scripted_cluster/). One control plane per module, a
namespace per test. A hang is detected after SETTLE real seconds (nothing sleeps blindly: the run
is a thread we wait for, each step waits for the state it needs).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.errors import ClusterError
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.backend_harness import Cluster, submitted
from testing.mpijob_manifests import JOB, JSON, mpijob_manifest
from testing.scripted_cluster.scenarios import JobScenario

pytestmark = pytest.mark.control_plane

SETTLE = 30.0
STOPPED = f"[ci-runner] deleted MPIJob {JOB} and its pods"
PIP_ERROR = (
    "ERROR: Could not find a version that satisfies the requirement torch==9.9",
    "ERROR: No matching distribution found for torch==9.9",
    "fix: check requirements.txt",
)
LOG = ["[0]<stdout>:epoch 1 loss 0.9", "[1]<stdout>:epoch 1 loss 0.8"]


def leftovers(cluster: Cluster, settle: float = SETTLE) -> list[tuple[str, str]]:
    """What the run left in the namespace (Events expire by themselves), once the garbage
    collector has had up to ``settle`` seconds."""
    return cluster.leftovers(settle)


def test_worker_init_container_fails(cluster: Cluster) -> None:
    """Scripted: on real nodes as test_a_requirement_pip_cannot_find_fails_with_pips_error; here the
    exact CI-log lines with one worker ready, the log tail and the Failure's fields."""
    job = cluster.started(mpijob_manifest(wait_for_workers=True, setup=True))
    job.workers_running([0])
    job.worker_init_fails(1, "install-requirements", 1, *PIP_ERROR)
    result = cluster.result(timeout=SETTLE)
    assert result.outcome is Outcome.FAILED
    assert result.failure is not None
    assert (result.failure.kind, result.failure.pod, result.failure.exit_code) == (
        FailureKind.SETUP,
        f"{JOB}-worker-1",
        1,
    )
    message = (
        f"worker {JOB}-worker-1: init container install-requirements exited with code 1: "
        "fix: check requirements.txt"
    )
    assert result.failure.message == message
    assert result.failure.container == "install-requirements"
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        f"[ci-runner] the last lines of container install-requirements in pod {JOB}-worker-1:",
        *PIP_ERROR,
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        STOPPED,
    ]
    assert result.log_tail == PIP_ERROR  # the comment shows them too
    assert leftovers(cluster) == []


def test_worker_oom_during_setup(cluster: Cluster) -> None:
    """Scripted: on real nodes as
    test_an_init_container_whose_own_process_goes_over_its_limit_ends_oom_killed_137; here the
    whole run's CI-log lines and result."""
    job = cluster.started(mpijob_manifest(wait_for_workers=True, setup=True))
    job.worker_init_fails(0, "install-requirements", 137, reason="OOMKilled")
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert (result.failure.kind, result.failure.pod, result.failure.exit_code) == (
        FailureKind.OOM_KILLED,
        f"{JOB}-worker-0",
        137,
    )
    message = (
        f"worker {JOB}-worker-0: init container install-requirements was OOMKilled "
        "(exit code 137, memory limit 4Gi)"
    )
    assert cluster.log.lines == [
        submitted(cluster),
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        STOPPED,
    ]


def test_worker_never_ready(cluster: Cluster) -> None:
    """Scripted: the real kubelet's status of a worker that is never Ready is read on real nodes
    (test_a_readiness_probe_that_fails_leaves_the_worker_running_not_ready); here the day of
    setup_timeout on the ManualClock."""
    job = cluster.started(mpijob_manifest(wait_for_workers=True))
    job.worker_never_ready(1)
    job.workers_running([0])  # its line comes after the pods watch brought worker-1's state
    cluster.log.wait_for("[ci-runner] workers ready 1/2")
    cluster.clock.advance(24 * 3600)
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert result.failure.pod == f"{JOB}-worker-1"
    message = (
        f"worker {JOB}-worker-1 was not Ready after 86400s of setup (kubernetes.setup_timeout): "
        "container worker still running, not Ready"
    )
    assert cluster.log.lines == [
        submitted(cluster),
        "[ci-runner] workers ready 1/2",
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        STOPPED,
    ]


def test_quota_denies_a_worker(cluster: Cluster) -> None:
    """Scripted: what is tested is quota admission refusing a worker pod, which never reaches a
    node; the same path on real nodes is
    test_resources_none_in_a_quota_namespace_without_defaults_is_refused_in_one_line."""
    cluster.quota("gpu", {"requests.nvidia.com/gpu": "1"})
    cluster.start(mpijob_manifest(wait_for_workers=True))
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    message = (
        "MPI Operator cannot create the job's pods: worker pod created failed: "
        f'pods "{JOB}-worker-1" '
        "is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, "
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1; fix: a "
        f"ResourceQuota in namespace {cluster.namespace} is used up: wait for other jobs to "
        "finish, ask for less (workers, resources), or have the quota raised"
    )
    assert result.failure == Failure(FailureKind.REFUSED, message)
    assert cluster.log.lines == [
        submitted(cluster),
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        STOPPED,
    ]
    assert leftovers(cluster) == []


def test_a_cpu_quota_refuses_containers_that_declare_no_cpu(cluster: Cluster) -> None:
    """Scripted: what is tested is quota admission refusing the worker pods, which never reach a
    node; the same path on real nodes is
    test_resources_none_in_a_quota_namespace_without_defaults_is_refused_in_one_line."""
    cluster.quota("compute", {"limits.cpu": "64", "requests.memory": "256Gi"})
    cluster.start(mpijob_manifest(wait_for_workers=True, setup=True))
    result = cluster.result(timeout=SETTLE)
    message = (
        "MPI Operator cannot create the job's pods: worker pod created failed: "
        f'pods "{JOB}-worker-0" is forbidden: failed quota: compute: must specify limits.cpu '
        "for: fetch-code,install-requirements,worker; requests.memory for: fetch-code; fix: the "
        "namespace's ResourceQuota counts cpu and memory, so every container must declare them: "
        "set resources.cpu, resources.memory and resources.setup in train.yaml"
    )
    assert result.failure == Failure(FailureKind.REFUSED, message)
    assert leftovers(cluster) == []


def test_a_refused_launcher_pod_fails_at_once(cluster: Cluster) -> None:
    # The Job controller's FailedCreate on the launcher Job (controller_utils.go): the MPIJob
    # shows nothing, and without reading it the job would wait setup_timeout.
    # PodSecurity admission refuses the privileged launcher; the workers pass "baseline".
    """Scripted: what is tested is PodSecurity admission and the Job controller's FailedCreate for
    the launcher; the workers' node only stands in."""
    cluster.label_namespace({"pod-security.kubernetes.io/enforce": "baseline"})
    manifest = mpijob_manifest(wait_for_workers=True)
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["securityContext"] = {"privileged": True}
    job = cluster.started(manifest)
    job.workers_running()
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert result.failure.kind is FailureKind.REFUSED
    assert re.fullmatch(
        r"the launcher Job cannot create the launcher's pod: Error creating: pods "
        rf'"{JOB}-launcher-[a-z0-9]{{5}}" is forbidden: violates PodSecurity '
        r'"baseline:latest": privileged '
        r'\(container "launcher" must not set securityContext\.privileged=true\); fix: namespace '
        rf"{cluster.namespace} enforces PodSecurity baseline \(label "
        r"pod-security\.kubernetes\.io/enforce\); ci-runner's pods meet baseline \(and restricted "
        r"with kubernetes\.run_as_user\): what the message names was added to them by the cluster "
        r"\(a mutating admission webhook\), ask its administrators",
        result.failure.message,
    ), result.failure.message
    assert leftovers(cluster) == []


def test_zone_offsets_and_out_of_order_lines_across_a_drop(cluster: Cluster) -> None:
    """Scripted: stdout and stderr stamped out of order, then a cut at a chosen line, which a real
    containerd and kubelet do not produce on cue."""
    cluster.kubelet.zones[cluster.namespace] = int(timedelta(hours=2).total_seconds())
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    job.launcher_log("[0]<stdout>:step 1", at=10_000_000_000)
    job.launcher_log("[0]<stderr>:warn", stream="stderr", at=9_500_000_000)
    job.launcher_log_cut("[0]<stdout>:step 2")
    job.launcher_log("[0]<stdout>:step 3")
    job.launcher_exits(0)
    result = cluster.result(timeout=SETTLE)
    assert result.outcome is Outcome.SUCCEEDED
    lines = [line for line in cluster.log.lines if not line.startswith("[ci-runner]")]
    assert lines == [
        "[0]<stdout>:step 1",
        "[0]<stderr>:warn",
        "[0]<stdout>:step 2",
        "[0]<stdout>:step 3",
    ]


def test_create_refused_leaves_no_secret(cluster: Cluster) -> None:
    """Scripted: what is tested is RBAC's 403 on create; no pod is made."""
    cluster.forbid_mpijob_create()
    cluster.start()
    with pytest.raises(ClusterError, match="403"):
        cluster.result()
    assert leftovers(cluster) == []


def test_keep_finished_keeps_the_job_and_a_later_run_deletes_it(cluster: Cluster) -> None:
    """Scripted: what is tested is keep_finished's stamp and its reap after a 2 h jump of the
    ManualClock; the node only stands in."""
    job = cluster.started(keep_finished=7200)
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    until = (cluster.clock.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert cluster.log.lines[-2:] == [
        f"[ci-runner] MPIJob {JOB} succeeded",
        f"[ci-runner] keeping MPIJob {JOB} until {until} (kubernetes.keep_finished): the "
        f"first ci-runner train in namespace {cluster.namespace} after that deletes it; "
        "ci-runner "
        "cancel deletes it now",
    ]
    assert job.mpijob["metadata"]["annotations"]["ci-runner/delete-after"] == until
    assert ("secrets", f"{JOB}-secrets") in leftovers(cluster, settle=0)

    # A later run of another job, once the time has passed, deletes it.
    cluster.clock.advance(7200)
    other = mpijob_manifest("train-later")
    later = cluster.started(other)
    later.workers_running()
    later.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {later.launcher_pod})")
    later.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert EXPIRED_LINE in cluster.log.lines
    assert (
        cluster.log.lines[-1] == "[ci-runner] deleted MPIJob train-later, its pods and its Secret"
    )
    assert leftovers(cluster) == []


EXPIRED_LINE = (
    f"[ci-runner] deleted MPIJob {JOB}: its time (ci-runner/delete-after) had passed; an earlier "
    "run kept it, or was stopped before it could delete it"
)


def _with_worker_deadline(manifest: JSON, seconds: int) -> JSON:
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["activeDeadlineSeconds"] = (
        seconds
    )
    return manifest


def _succeeds(cluster: Cluster, job: JobScenario) -> None:
    """``job``'s workers and launcher run, the launcher exits 0: nothing is left."""
    job.workers_running()
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert leftovers(cluster) == []


def test_a_job_is_stamped_at_submission_with_when_it_may_be_reaped(cluster: Cluster) -> None:
    """Scripted: what is tested is the delete-after stamp, exact under the ManualClock; the node
    only stands in."""
    job = cluster.started(_with_worker_deadline(mpijob_manifest(), 9000), unschedulable_timeout=300)
    until = (cluster.clock.now() + timedelta(seconds=9300)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert job.mpijob["metadata"]["annotations"]["ci-runner/delete-after"] == until
    _succeeds(cluster, job)


def test_the_next_run_deletes_what_a_killed_ci_job_left(cluster: Cluster) -> None:
    # What a CI job killed during setup leaves: its MPIJob, stamped at submission, and workers.
    """Scripted: on real nodes as
    test_a_ci_job_killed_during_setup_leaves_no_running_pod_and_the_next_run_reaps_it; here the reap
    at the start of train, under the ManualClock."""
    api = KubeApi(cluster.api_client(), cluster.namespace, cluster.clock)
    secret = JobSecret(secret_name("train-killed"), ("git-token",), {"git-token": "t"})
    stamp = cluster.clock.now() + timedelta(seconds=3000)
    submit(api, mpijob_manifest("train-killed"), secret, stamp)
    cluster.job("train-killed").workers_running()
    cluster.clock.advance(3600)
    job = cluster.started()
    assert cluster.log.lines[:2] == [
        submitted(cluster),
        "[ci-runner] deleted MPIJob train-killed: its time (ci-runner/delete-after) had passed; "
        "an earlier run kept it, or was stopped before it could delete it",
    ]
    _succeeds(cluster, job)
