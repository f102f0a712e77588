"""An Indexed Job's objects (distributed: torchrun) submitted, kept, cancelled and reaped through
the real client against the in-process API server: the Job first, then its Service, Secret and
ConfigMap, each owned by the Job; each kind reaps its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.cleanup import (
    cancel_on_cluster,
    delete_expired,
    expired_line,
    keep_until,
    remove_finished_job,
)
from ci_runner.backends.kubernetes.resources import JOBS
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.fake_kube.server import FakeKubeServer
from testing.mpijob_manifests import mpijob_manifest
from testing.torchrun_jobs import indexed_job_manifest, service_manifest

JSON = dict[str, object]
NOW = datetime(2026, 12, 5, 10, 0, tzinfo=timezone.utc)
SECRET = JobSecret(secret_name("j"), ("git-token",), {"git-token": "t0ken"})
SCRIPTS = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j-scripts"}, "data": {}}


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


def api_of(server: FakeKubeServer) -> KubeApi:
    client = kubernetes.client.ApiClient(server.configuration())
    return KubeApi(client, "ml", ManualClock(), KUBERNETES_RETRY)


def owners(server: FakeKubeServer, key: str, name: str) -> list[tuple[str, str, str]]:
    found = server.store.find(key, "ml", name)
    assert found is not None, f"no {key} {name}"
    return [(o["kind"], o["name"], o["uid"]) for o in found["metadata"]["ownerReferences"]]


def test_the_job_then_its_service_secret_and_configmap_owned_by_it(server: FakeKubeServer) -> None:
    api = api_of(server)
    manifest = indexed_job_manifest("j")
    submission = submit(api, manifest, SECRET, NOW, SCRIPTS, service_manifest("j"))
    assert not submission.attached
    uid = submission.uid
    job = server.store.get("jobs.batch", "ml", "j")
    assert job["metadata"]["annotations"] == {"ci-runner/delete-after": "2026-12-05T10:00:00Z"}
    for key, name in (("services", "j"), ("secrets", "j-secrets"), ("configmaps", "j-scripts")):
        assert owners(server, key, name) == [("Job", "j", uid)]
    # A restarted CI job: attached, and what it left is given the Job again.
    again = submit(api, manifest, SECRET, NOW, SCRIPTS, service_manifest("j"))
    assert (again.attached, again.uid) == (True, uid)
    assert owners(server, "services", "j") == [("Job", "j", uid)]


def test_cancel_deletes_the_job_its_pods_and_its_secret(server: FakeKubeServer) -> None:
    api = api_of(server)
    submit(api, indexed_job_manifest("j"), SECRET, None, SCRIPTS, service_manifest("j"))
    pod = {"metadata": {"name": "j-0-b2c4d", "labels": {"batch.kubernetes.io/job-name": "j"}}}
    other = {"metadata": {"name": "k-0-b2c4d", "labels": {"batch.kubernetes.io/job-name": "k"}}}
    server.store.create("pods", "ml", pod)
    server.store.create("pods", "ml", other)
    client = kubernetes.client.ApiClient(server.configuration())
    assert cancel_on_cluster(client, "ml", "j", SECRET.name, ManualClock(), kind="Job") == []
    # Deleted in the foreground: the garbage collector (not this server's) deletes its pods,
    # Service and ConfigMap, then the Job.
    job = server.store.get("jobs.batch", "ml", "j")
    assert job["metadata"]["deletionTimestamp"]
    assert job["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert server.store.find("secrets", "ml", SECRET.name) is None
    assert [p["metadata"]["name"] for p in server.store.list("pods", "ml")[0]] == ["k-0-b2c4d"]


def test_kept_finished_and_reaped_per_kind(server: FakeKubeServer) -> None:
    api = api_of(server)
    submit(api, indexed_job_manifest("old"), SECRET, NOW, None, service_manifest("old"))
    submit(api, mpijob_manifest("mpi"), SECRET, NOW, None)
    later = NOW + timedelta(hours=1)
    assert delete_expired(api, later, resource=JOBS) == ["old"]
    assert server.store.find("mpijobs.kubeflow.org", "ml", "mpi") is not None  # not a Job
    assert expired_line("old", "Job") == (
        "deleted Job old: its time (ci-runner/delete-after) had passed; an earlier run kept it, "
        "or was stopped before it could delete it"
    )
    submit(api, indexed_job_manifest("j"), SECRET, None, None, service_manifest("j"))
    assert keep_until(api, "j", later, JOBS) == "2026-12-05T11:00:00Z"
    remove_finished_job(api, "j", SECRET.name, JOBS)
    assert server.store.find("jobs.batch", "ml", "j") is None
