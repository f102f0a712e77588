"""Issue 14's scenarios, played by the faithful fake cluster against the real client.

Each scenario is what MPI Operator v0.8.2, the Job controller and the kubelet really do (see
tests/control_plane/). Those the client does not handle yet are ``xfail(strict=True)`` with the
client behaviour issue 14 asks for; the client, when right, answers within milliseconds, so a
hang is detected after SETTLE real seconds (nothing sleeps: the run is a thread we wait for).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from ci_runner.backends.result import FailureKind, Outcome
from ci_runner.errors import ClusterError
from tests.kube_admission import Quota
from tests.kube_harness import JOB, NAMESPACE, Cluster, mpijob_manifest, running_cluster

SETTLE = 5.0
PIP_ERROR = (
    "ERROR: Could not find a version that satisfies the requirement torch==9.9",
    "ERROR: No matching distribution found for torch==9.9",
    "fix: check requirements.txt",
)
LOG = ["[0]<stdout>:epoch 1 loss 0.9", "[1]<stdout>:epoch 1 loss 0.8"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path) as cluster:
        yield cluster


def leftovers(cluster: Cluster) -> list[tuple[str, str]]:
    """What the run left in the namespace (Events expire by themselves)."""
    return sorted(
        (key, name)
        for key, namespace, name in cluster.server.store.objects
        if namespace == NAMESPACE and key != "events"
    )


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: a worker whose init container fails before Ready gets no condition from "
    "v0.8.2 (no launcher with WaitForWorkersReady); the client must fail from the pod's status "
    "with the container, exit code and that container's log, and clean up",
)
def test_worker_init_container_fails(cluster: Cluster) -> None:
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
    assert "install-requirements" in result.failure.message
    assert PIP_ERROR[-1] in cluster.log.lines
    assert leftovers(cluster) == []


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: OOMKilled in an init container (setup) leaves the MPIJob Created for ever; "
    "the client must report the OOM of that worker's container",
)
def test_worker_oom_during_setup(cluster: Cluster) -> None:
    job = cluster.started(mpijob_manifest(wait_for_workers=True, setup=True))
    job.worker_init_fails(0, "install-requirements", 137, reason="OOMKilled")
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert (result.failure.kind, result.failure.pod, result.failure.exit_code) == (
        FailureKind.OOM_KILLED,
        f"{JOB}-worker-0",
        137,
    )


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: a worker that never turns Ready blocks WaitForWorkersReady for ever; the "
    "client needs kubernetes.setup_timeout and must fail when it passes",
)
def test_worker_never_ready(cluster: Cluster) -> None:
    job = cluster.started(mpijob_manifest(wait_for_workers=True))
    job.workers_running([0])
    job.worker_never_ready(1)
    cluster.log.wait_for("[ci-runner] workers ready 1/2")
    cluster.clock.advance(24 * 3600)
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert result.failure.pod == f"{JOB}-worker-1"


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: a worker pod refused by ResourceQuota is only an MPIJobFailed Warning "
    "Event; the client must fail with the quota's message instead of waiting",
)
def test_quota_denies_a_worker(cluster: Cluster) -> None:
    quota = Quota("gpu", NAMESPACE, {"requests.nvidia.com/gpu": "1"})
    cluster.server.admission.quotas.append(quota)
    cluster.start(mpijob_manifest(wait_for_workers=True))
    result = cluster.result(timeout=SETTLE)
    assert result.failure is not None
    assert "exceeded quota: gpu" in result.failure.message
    assert leftovers(cluster) == []


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: with a sidecar in the launcher pod, pods/log without container= is a 400; "
    "the client must name the launcher container",
)
def test_sidecar_in_the_launcher_pod(cluster: Cluster) -> None:
    job = cluster.started(mpijob_manifest(sidecar=True))
    job.workers_running()
    job.launcher_running()
    job.launcher_log(*LOG)
    job.launcher_exits(0)
    result = cluster.result(timeout=SETTLE)
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.log.lines[-len(LOG) :] == LOG


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: kubelet timestamps carry the node's zone (+02:00) and stderr may be stamped "
    "before the stdout line it follows; after a dropped stream every line must appear once",
)
def test_zone_offsets_and_out_of_order_lines_across_a_drop(tmp_path: Path) -> None:
    with running_cluster(tmp_path, zone=timedelta(hours=2)) as cluster:
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


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: ErrImagePull is retried by the kubelet; the client must wait (a grace "
    "period or setup_timeout), not fail and delete the job at once",
)
def test_image_pull_error_that_recovers(cluster: Cluster) -> None:
    job = cluster.started()
    job.image_pull_fails(f"{JOB}-worker-0", failures=1)
    cluster.server.advance(10)  # the kubelet pulls again, and succeeds
    job.workers_running()
    job.launcher_running()
    job.launcher_exits(0)
    assert cluster.result(timeout=SETTLE).outcome is Outcome.SUCCEEDED


def test_launcher_fails_once_under_backoff_limit_then_succeeds(cluster: Cluster) -> None:
    job = cluster.started(mpijob_manifest(backoff_limit=1))
    job.workers_running()
    job.launcher_running()
    first = job.launcher_pod
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {first})")
    job.launcher_log("[0]<stderr>:connection refused")
    cluster.log.wait_for("[0]<stderr>:connection refused")
    job.launcher_exits(1)
    cluster.server.advance(10)  # the Job controller's back-off, then a new launcher pod
    second = job.launcher_pod
    assert second != first
    job.launcher_running()
    cluster.log.wait_for(f"[ci-runner] launcher running (pod {second})")
    job.launcher_log(*LOG)
    job.launcher_exits(0)
    result = cluster.result(timeout=SETTLE)
    assert result.outcome is Outcome.SUCCEEDED
    assert job.mpijob["status"]["replicaStatuses"]["Launcher"] == {"failed": 1, "succeeded": 1}
    assert cluster.log.lines == [
        f"[ci-runner] submitted MPIJob {JOB} in namespace {NAMESPACE}",
        "[ci-runner] workers ready 1/2",
        "[ci-runner] workers ready 2/2",
        f"[ci-runner] launcher running (pod {first})",
        "[0]<stderr>:connection refused",
        f"[ci-runner] launcher running (pod {second})",
        *LOG,
        f"[ci-runner] MPIJob {JOB} succeeded",
    ]


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: TTL covers only the launcher Job; after the result is saved the client "
    "must delete the MPIJob (its Secret, Service, ConfigMap and failed workers go with it)",
)
def test_success_leaves_nothing(cluster: Cluster) -> None:
    job = cluster.started()
    job.workers_running()
    job.launcher_running()
    job.launcher_exits(0)
    assert cluster.result().outcome is Outcome.SUCCEEDED
    assert leftovers(cluster) == []


@pytest.mark.xfail(
    strict=True,
    reason="issue 14: when the MPIJob create is refused the Secret made for it must be removed",
)
def test_create_refused_leaves_no_secret(cluster: Cluster) -> None:
    cluster.server.forbid("create", "mpijobs")
    cluster.start()
    with pytest.raises(ClusterError, match="403"):
        cluster.result()
    assert leftovers(cluster) == []
