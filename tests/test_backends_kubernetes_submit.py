"""submit: Secret, then MPIJob, then the Secret owned by the MPIJob; attach when it exists."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.cleanup import cancel_job, cancel_on_cluster
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.clock import ManualClock
from ci_runner.errors import ClusterError
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.fake_kube.scenarios import MpiOperator
from testing.fake_kube.server import FakeKubeServer
from testing.mpijob_manifests import NAMESPACE, mpijob_manifest


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        MpiOperator(server)
        yield server


def git_secret(job: str, data: dict[str, str]) -> JobSecret:
    return JobSecret(secret_name(job), tuple(data), data)


def make_api(server: FakeKubeServer) -> KubeApi:
    return KubeApi(kubernetes.client.ApiClient(server.configuration()), NAMESPACE, ManualClock())


def test_secret_then_job_then_owner_reference(server: FakeKubeServer) -> None:
    submission = submit(
        make_api(server), mpijob_manifest("j1"), git_secret("j1", {"git-token": "tok-1234"})
    )
    assert not submission.attached
    assert submission.name == "j1"
    order = [(r.verb, r.resource) for r in server.requests]
    assert order == [("create", "secrets"), ("create", "mpijobs"), ("patch", "secrets")]
    secret = server.store.get("secrets", NAMESPACE, secret_name("j1"))
    assert secret["data"] == {"git-token": "dG9rLTEyMzQ="}
    assert "stringData" not in secret
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "ci-runner"}
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "name": "j1",
            "uid": submission.uid,
        }
    ]
    # The garbage collector deletes the Secret with the job.
    server.store.delete("mpijobs.kubeflow.org", NAMESPACE, "j1")
    assert server.store.find("secrets", NAMESPACE, secret_name("j1")) is None


def test_a_restarted_ci_job_attaches_and_refreshes_the_secret(server: FakeKubeServer) -> None:
    api = make_api(server)
    first = submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "old-token"}))
    again = submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "new-token"}))
    assert again.attached
    assert again.uid == first.uid
    secret = server.store.get("secrets", NAMESPACE, secret_name("j1"))
    assert secret["data"] == {"git-token": "bmV3LXRva2Vu"}
    assert [ref["uid"] for ref in secret["metadata"]["ownerReferences"]] == [first.uid]


def test_cancel_deletes_everything_and_is_idempotent(server: FakeKubeServer) -> None:
    api = make_api(server)
    submit(api, mpijob_manifest("j1"), git_secret("j1", {"git-token": "tok-1234"}))
    submit(api, mpijob_manifest("j2"), git_secret("j2", {"git-token": "tok-1234"}))
    cancel_job(api, "j1", secret_name("j1"))
    cancel_job(api, "j1", secret_name("j1"))
    names = {
        key: sorted(o["metadata"]["name"] for o in server.store.list(key, NAMESPACE)[0])
        for key in (
            "pods",
            "secrets",
            "configmaps",
            "services",
            "jobs.batch",
            "mpijobs.kubeflow.org",
        )
    }
    assert names["mpijobs.kubeflow.org"] == ["j2"]
    assert names["secrets"] == ["j2-secrets", "j2-ssh"]
    assert names["configmaps"] == ["j2-config"]
    assert names["services"] == ["j2"]
    assert names["jobs.batch"] == ["j2-launcher"]
    assert [n for n in names["pods"] if not n.startswith("j2-")] == []
    deletes = [r.param("propagationPolicy") for r in server.requests if r.verb == "delete"]
    assert deletes  # the policy travels in the body, not the query
    mpijob_deletes = [r for r in server.requests if r.verb == "delete" and r.resource == "mpijobs"]
    assert len(mpijob_deletes) == 2


def test_cancel_of_a_job_that_never_was(server: FakeKubeServer) -> None:
    cancel_job(make_api(server), "nothing", secret_name("nothing"))
    assert server.count("delete", "secrets") == 1


def test_cancel_on_cluster_refused_is_one_line(server: FakeKubeServer) -> None:
    server.forbid("delete", "mpijobs")
    client = kubernetes.client.ApiClient(server.configuration())
    with pytest.raises(ClusterError) as caught:
        cancel_on_cluster(client, NAMESPACE, "j1", secret_name("j1"), ManualClock())
    assert str(caught.value).startswith(
        "Kubernetes refused to delete mpijobs.kubeflow.org in namespace ml (403 Forbidden: "
    )
