"""submit: the MPIJob, then its Secret owned by it from its creation; attach when it exists. On
the scripted cluster (the real kube-apiserver, garbage collector and MPI Operator v0.8.2)."""

from __future__ import annotations

import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.cleanup import cancel_job, cancel_on_cluster
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.clock import ManualClock
from ci_runner.errors import ClusterError
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.backend_harness import KINDS, Cluster
from testing.mpijob_manifests import JSON, mpijob_manifest
from testing.waiting import wait_for

pytestmark = pytest.mark.control_plane


def git_secret(job: str, data: dict[str, str]) -> JobSecret:
    return JobSecret(secret_name(job), tuple(data), data)


def make_api(cluster: Cluster) -> KubeApi:
    return KubeApi(cluster.api_client(), cluster.namespace, ManualClock())


def secret(cluster: Cluster, name: str) -> JSON | None:
    return cluster.admin.get(f"/api/v1/namespaces/{cluster.namespace}/secrets/{name}")


def test_the_job_then_its_secret_owned_from_its_creation(cluster: Cluster) -> None:
    """Scripted: what is tested is the request order (FaultProxy) and the garbage collector; no pod
    runs."""
    submission = submit(
        make_api(cluster), mpijob_manifest("j1"), git_secret("j1", {"git-token": "tok-1234"})
    )
    assert not submission.attached
    assert submission.name == "j1"
    order = [(r.verb, r.resource) for r in cluster.api.requests]
    assert order == [("create", "mpijobs"), ("create", "secrets")]  # owned as it is created
    found = secret(cluster, secret_name("j1"))
    assert found is not None
    assert found["data"] == {"git-token": "dG9rLTEyMzQ="}
    assert "stringData" not in found
    assert found["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "ci-runner"}
    assert found["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "name": "j1",
            "uid": submission.uid,
        }
    ]
    # The garbage collector deletes the Secret with the job.
    cluster.admin.delete(KINDS["mpijobs.kubeflow.org"].format(ns=cluster.namespace) + "/j1")
    wait_for("the Secret gone with its MPIJob", lambda: secret(cluster, secret_name("j1")) is None)


def test_a_restarted_ci_job_attaches_and_refreshes_the_secret(cluster: Cluster) -> None:
    """Scripted: what is tested is kube-apiserver's answers to submit; no pod runs."""
    api = make_api(cluster)
    first = submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "old-token"}))
    again = submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "new-token"}))
    assert again.attached
    assert again.uid == first.uid
    found = secret(cluster, secret_name("j1"))
    assert found is not None
    assert found["data"] == {"git-token": "bmV3LXRva2Vu"}
    assert [ref["uid"] for ref in found["metadata"]["ownerReferences"]] == [first.uid]


def test_a_refused_secret_takes_its_new_job_with_it(cluster: Cluster) -> None:
    """Scripted: what is tested is RBAC's 403 and the request order (FaultProxy); no pod runs."""
    cluster.forbid("create", "secrets")
    with pytest.raises(ClusterError) as caught:
        submit(make_api(cluster), mpijob_manifest("j1"), git_secret("j1", {"git-token": "t"}))
    assert str(caught.value).startswith(
        f"Kubernetes refused to create secrets in namespace {cluster.namespace} (403 Forbidden: "
    )
    order = [(r.verb, r.resource) for r in cluster.api.requests]
    assert order == [("create", "mpijobs"), ("create", "secrets"), ("delete", "mpijobs")]
    mpijobs = KINDS["mpijobs.kubeflow.org"].format(ns=cluster.namespace)
    wait_for("the MPIJob gone", lambda: cluster.admin.get(f"{mpijobs}/j1") is None)


def test_a_secret_an_earlier_run_left_gets_this_runs_values_and_owner(cluster: Cluster) -> None:
    """Scripted: what is tested is kube-apiserver's answers to submit; no pod runs."""
    secrets = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    cluster.admin.create(secrets, {"metadata": {"name": secret_name("j1")}, "data": {}})
    submission = submit(
        make_api(cluster), mpijob_manifest("j1"), git_secret("j1", {"git-token": "tok-1234"})
    )
    found = secret(cluster, secret_name("j1"))
    assert found is not None
    assert found["data"] == {"git-token": "dG9rLTEyMzQ="}
    assert [ref["uid"] for ref in found["metadata"]["ownerReferences"]] == [submission.uid]


def test_cancel_deletes_everything_and_is_idempotent(cluster: Cluster) -> None:
    """Scripted: what is tested is the garbage collector and the deletes' parameters (FaultProxy);
    no pod runs."""
    api = make_api(cluster)
    submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "tok-1234"}))
    submit(api, mpijob_manifest("j2"), git_secret("j2", {"git-token": "tok-1234"}))
    # The operator made both jobs' objects (j2's launcher Job last of them).
    for job in ("j1", "j2"):
        cluster.job(job).launcher_created()
    cancel_job(api, "j1", secret_name("j1"))
    cancel_job(api, "j1", secret_name("j1"))

    def j1_gone() -> dict[str, list[str]] | None:
        names = {
            kind: sorted(name for key, name in cluster.leftovers(settle=0) if key == kind)
            for kind in KINDS
        }
        left = [n for kind in names.values() for n in kind if not n.startswith("j2")]
        return None if left else names

    names = wait_for("j1's objects gone", j1_gone)
    assert names["mpijobs.kubeflow.org"] == ["j2"]
    assert names["secrets"] == ["j2-secrets", "j2-ssh"]
    assert names["configmaps"] == ["j2-config"]
    assert names["services"] == ["j2"]
    assert names["jobs.batch"] == ["j2-launcher"]
    deletes = [r for r in cluster.api.requests if r.verb == "delete"]
    # the propagation policy travels in the body, not the query
    assert [r.param("propagationPolicy") for r in deletes] == [None] * len(deletes)
    mpijob_deletes = [r for r in deletes if r.resource == "mpijobs"]
    assert len(mpijob_deletes) == 2


def test_cancel_of_a_job_that_never_was(cluster: Cluster) -> None:
    """Scripted: what is tested is kube-apiserver's answers to cancel; no pod runs."""
    cancel_job(make_api(cluster), "nothing", secret_name("nothing"))
    assert cluster.api.count("delete", "secrets") == 1


def test_cancel_on_cluster_refused_is_one_line(cluster: Cluster) -> None:
    """Scripted: what is tested is RBAC's 403 at kube-apiserver; no pod runs."""
    cluster.forbid("delete", "mpijobs")
    with pytest.raises(ClusterError) as caught:
        cancel_on_cluster(
            cluster.api_client(), cluster.namespace, "j1", secret_name("j1"), ManualClock()
        )
    assert str(caught.value).startswith(
        f"Kubernetes refused to delete mpijobs.kubeflow.org in namespace {cluster.namespace} "
        "(403 Forbidden: "
    )
