"""REQUIRED_PERMISSIONS is exactly what the backend asks of the API server."""

from __future__ import annotations

from pathlib import Path

from ci_runner.backends.kubernetes.permissions import REQUIRED_PERMISSIONS
from ci_runner.backends.result import Outcome
from testing.fake_kube.harness import running_cluster
from testing.mpijob_manifests import JOB, NAMESPACE, mpijob_manifest


def required() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb) for group, resource, verbs in REQUIRED_PERMISSIONS for verb in verbs
    }


def test_every_request_is_covered_and_every_permission_used(tmp_path: Path) -> None:
    used: set[tuple[str, str, str]] = set()
    # A whole run: submit, follow, log, finish, stop the workers the operator left running.
    with running_cluster(tmp_path / "a") as cluster:
        job = cluster.started(mpijob_manifest(clean_pod_policy="None"))
        job.workers_running()
        job.launcher_running()
        cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
        job.launcher_log("hi")
        job.launcher_exits(0)
        assert cluster.backend_under_test is not None
        cluster.backend_under_test.keep_finished = 3600  # marked to be kept: a patch
        assert cluster.result().outcome is Outcome.SUCCEEDED
        used |= cluster.server.verbs_used()
    # Attach to a job already there, then cancel it.
    with running_cluster(tmp_path / "b") as cluster:
        store = cluster.server.store
        store.create("secrets", NAMESPACE, {"metadata": {"name": f"{JOB}-secrets"}})
        store.create("mpijobs.kubeflow.org", NAMESPACE, mpijob_manifest())
        cluster.started()
        assert cluster.backend_under_test is not None
        cluster.backend_under_test.cancel()
        assert cluster.result().outcome is Outcome.CANCELLED
        used |= cluster.server.verbs_used()
    assert used == required()
