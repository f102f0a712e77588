"""REQUIRED_PERMISSIONS is exactly what the backend asks of the API server: every request the
backend makes on the scripted cluster (counted by the fault proxy in front of the real
kube-apiserver) is covered, and every permission is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.permissions import REQUIRED_PERMISSIONS
from ci_runner.backends.kubernetes.queue_check import check_local_queue
from ci_runner.backends.result import Outcome
from ci_runner.clock import ManualClock
from ci_runner.config.schema import load_config
from testing.backend_harness import cluster_on
from testing.kueue_objects import KueueObjects, pending_workload
from testing.mpijob_manifests import JOB, mpijob_manifest
from testing.scripted_cluster.cluster import ScriptedCluster
from testing.scripted_cluster.scenarios import MPIJOBS
from testing.torchrun_jobs import JOBS, indexed_job_manifest, service_manifest

pytestmark = pytest.mark.control_plane


def required() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb) for group, resource, verbs in REQUIRED_PERMISSIONS for verb in verbs
    }


def test_every_request_is_covered_and_every_permission_used(
    scripted: ScriptedCluster, tmp_path: Path
) -> None:
    """Scripted: what is tested is FaultProxy's record of every request the backend makes (for an
    MPIJob and for an Indexed Job); the node only stands in."""
    used: set[tuple[str, str, str]] = set()
    # A whole run: submit, follow, log, finish, stop the workers the operator left running.
    with cluster_on(scripted, tmp_path / "a") as cluster:
        # Marked to be kept at the end: a patch.
        job = cluster.started(mpijob_manifest(clean_pod_policy="None"), keep_finished=3600)
        job.workers_running()
        job.launcher_running()
        cluster.log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
        job.launcher_log("hi")
        job.launcher_exits(0)
        assert cluster.result().outcome is Outcome.SUCCEEDED
        used |= cluster.api.verbs_used()
    # Attach to a job already there, then cancel it.
    with cluster_on(scripted, tmp_path / "b") as cluster:
        secrets = f"/api/v1/namespaces/{cluster.namespace}/secrets"
        cluster.admin.create(secrets, {"metadata": {"name": f"{JOB}-secrets"}})
        configmaps = f"/api/v1/namespaces/{cluster.namespace}/configmaps"
        cluster.admin.create(configmaps, {"metadata": {"name": f"{JOB}-scripts"}})
        cluster.admin.create(MPIJOBS.format(ns=cluster.namespace), mpijob_manifest())
        cluster.started()
        assert cluster.backend_under_test is not None
        cluster.backend_under_test.cancel()
        assert cluster.result().outcome is Outcome.CANCELLED
        used |= cluster.api.verbs_used()
    # distributed: torchrun, an Indexed Job: a whole run kept at the end, every node logged.
    with cluster_on(scripted, tmp_path / "c") as cluster:
        nodes = cluster.started_indexed(keep_finished=3600)
        nodes.nodes_running()
        cluster.log.wait_for("[ci-runner] nodes ready 2/2")
        nodes.node_log(0, "[0]<std>:hi")
        nodes.node_log(1, "[1]<std>:hi")
        cluster.log.wait_for("[1]<std>:hi")
        nodes.node_exits(1, 0)
        nodes.node_exits(0, 0)
        assert cluster.result().outcome is Outcome.SUCCEEDED
        used |= cluster.api.verbs_used()
    # Attach to an Indexed Job already there (its Service too), then cancel it.
    with cluster_on(scripted, tmp_path / "d") as cluster:
        namespace = f"/api/v1/namespaces/{cluster.namespace}"
        cluster.admin.create(f"{namespace}/secrets", {"metadata": {"name": f"{JOB}-secrets"}})
        cluster.admin.create(f"{namespace}/configmaps", {"metadata": {"name": f"{JOB}-scripts"}})
        cluster.admin.create(f"{namespace}/services", service_manifest())
        cluster.admin.create(JOBS.format(ns=cluster.namespace), indexed_job_manifest())
        cluster.started_indexed()
        assert cluster.backend_under_test is not None
        cluster.backend_under_test.cancel()
        assert cluster.result().outcome is Outcome.CANCELLED
        used |= cluster.api.verbs_used()
    # kubernetes.local_queue: its LocalQueue read before submission, its Workload watched.
    with cluster_on(scripted, tmp_path / "e") as cluster, KueueObjects(cluster.admin) as kueue:
        kueue.local_queue(cluster.namespace, "team-a", "training")
        config = load_config("name: q\nimage: i\ncommand: c\nkubernetes: {local_queue: team-a}\n")
        api = KubeApi(cluster.api_client(), cluster.namespace, ManualClock())
        queue = check_local_queue(api, config, print)
        assert queue is not None and queue.visible
        manifest = mpijob_manifest()
        manifest["spec"]["runPolicy"]["suspend"] = True
        cluster.started(manifest, queue=queue)
        cluster.api.wait_until(lambda: "workloads" in cluster.api.watching())
        # Kueue's Workload of the job, as Kueue v0.17.0 leaves one without quota (the scripted
        # cluster has Kueue's CRDs, not Kueue): the backend then asks for its position.
        queued = cluster.admin.get(f"{MPIJOBS.format(ns=cluster.namespace)}/{JOB}")
        assert queued is not None
        pending_workload(cluster.admin, cluster.namespace, str(queued["metadata"]["uid"]))
        cluster.api.wait_until(lambda: cluster.api.count("get", "localqueues/pendingworkloads") > 0)
        assert cluster.backend_under_test is not None
        cluster.backend_under_test.cancel()
        assert cluster.result().outcome is Outcome.CANCELLED
        used |= cluster.api.verbs_used()
    assert used == required()
