"""distributed: torchrun on a real control plane: an Indexed Job (testing/torchrun_jobs.py, shaped
as ci-runner renders it) that the real Job controller runs, with the test playing each node's
kubelet (testing/scripted_cluster/). The exact CI log: every node's lines, the status lines, the
one line of a failed node; and what a cancel leaves (nothing). One control plane per module."""

from __future__ import annotations

import pytest

from ci_runner.backends.result import Failure, FailureKind, Outcome
from testing.backend_harness import Cluster
from testing.mpijob_manifests import JOB

pytestmark = pytest.mark.control_plane

SETTLE = 30.0
DELETED = f"[ci-runner] deleted Job {JOB}, its pods, its Service and its Secret"
LOG = {
    0: ["[0]<std>:epoch 1 loss 0.9", "[1]<std>:epoch 1 loss 0.85"],
    1: ["[2]<std>:epoch 1 loss 0.8", "[3]<std>:epoch 1 loss 0.75"],
}


def test_two_nodes_train_and_both_logs_are_in_the_ci_log(cluster: Cluster) -> None:
    """Scripted: the Job controller, the Service and the backend's requests are real; the nodes
    only write the lines torchrun would (--tee 3 with the rank prefix), on cue."""
    job = cluster.started_indexed()
    job.nodes_running()
    cluster.log.wait_for("[ci-runner] nodes ready 2/2")
    job.node_log(0, LOG[0][0])
    job.node_log(1, *LOG[1])
    job.node_log(0, LOG[0][1])
    for line in [*LOG[0], *LOG[1]]:
        cluster.log.wait_for(line)
    job.node_exits(1, 0)
    job.node_exits(0, 0)
    result = cluster.result(timeout=SETTLE)
    assert (result.outcome, result.failure) == (Outcome.SUCCEEDED, None)
    status = [line for line in cluster.log.lines if line.startswith("[ci-runner]")]
    assert status == [
        job.submitted,
        "[ci-runner] nodes ready 1/2",
        "[ci-runner] nodes ready 2/2",
        f"[ci-runner] Job {JOB} succeeded",
        DELETED,
    ]
    logged = [line for line in cluster.log.lines if not line.startswith("[ci-runner]")]
    assert sorted(logged) == sorted([*LOG[0], *LOG[1]])
    assert [line for line in logged if line.startswith(("[0]", "[1]"))] == LOG[0]
    assert [line for line in logged if line.startswith(("[2]", "[3]"))] == LOG[1]
    assert cluster.leftovers(SETTLE) == []


def test_a_failing_node_fails_the_job_at_once_in_one_line(cluster: Cluster) -> None:
    """Scripted: node 1's torchrun exits 1 on cue; the real Job controller fails the Job (no
    index is retried) and stops node 0, whose torchrun exits 143 on the kubelet's SIGTERM."""
    job = cluster.started_indexed()
    job.nodes_running()
    cluster.log.wait_for("[ci-runner] nodes ready 2/2")
    job.node_log(1, "[2]<std>:RuntimeError: boom")
    cluster.log.wait_for("[2]<std>:RuntimeError: boom")
    failed = job.pod(1)
    job.node_exits(1, 1)
    result = cluster.result(timeout=SETTLE)
    message = f"node 1 (pod {failed}) exited with code 1"
    assert (result.outcome, result.failure) == (
        Outcome.FAILED,
        Failure(FailureKind.EXIT_CODE, message, 1, failed, "torchrun"),
    )
    assert cluster.log.lines[-2:] == [f"[ci-runner] Job {JOB} failed: {message}", DELETED]
    assert [line for line in cluster.log.lines if "failed" in line] == [
        f"[ci-runner] Job {JOB} failed: {message}"
    ]
    assert cluster.leftovers(SETTLE) == []


def test_cancel_deletes_the_job_its_service_configmap_secret_and_pods(cluster: Cluster) -> None:
    """Scripted: what is tested is what the backend deletes and what the garbage collector then
    removes; the nodes only run."""
    job = cluster.started_indexed()
    job.nodes_running()
    cluster.log.wait_for("[ci-runner] nodes ready 2/2")
    made = {
        (kind, name)
        for kind, name in cluster.leftovers(0)
        if kind in ("jobs.batch", "services", "configmaps", "secrets")
    }
    assert made == {
        ("jobs.batch", JOB),
        ("services", JOB),
        ("configmaps", f"{JOB}-scripts"),
        ("secrets", f"{JOB}-secrets"),
    }
    assert cluster.backend_under_test is not None
    cluster.backend_under_test.cancel()
    result = cluster.result(timeout=SETTLE)
    assert result.outcome is Outcome.CANCELLED
    assert cluster.log.lines[-2:] == [
        f"[ci-runner] cancelling: deleting Job {JOB}, its pods, its Service and its Secret",
        f"[ci-runner] Job {JOB} cancelled",
    ]
    assert cluster.leftovers(SETTLE) == []
