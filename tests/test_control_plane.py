"""The real control plane under the emulated cluster: kube-apiserver v1.35.4 serving MPI Operator
v0.8.2's CRD, the operator holding its Lease, Kueue v0.17.0 with only the webhooks of what exists
here, RBAC as examples/rbac.yaml grants it, the kubelets registered as Nodes with their Leases
(slow: root and scripts/setup-control-plane.sh's binaries)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import requests

from testing.control_plane import accounts
from testing.control_plane.run import LOCK_NAMESPACE
from testing.emulated_cluster.harness import NAMESPACE, Emulated, emulated
from testing.waiting import wait_for

pytestmark = pytest.mark.slow
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Emulated]:
    with emulated(nodes=2) as running:
        yield running


def as_ci_runner(cluster: Emulated) -> tuple[str, requests.Session]:
    """The API server's URL and a session with only the examples/rbac.yaml Role's token."""
    control = cluster.side.control
    assert control is not None
    if cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/ci-runner") is None:
        accounts.apply_rbac(cluster.api, NAMESPACE)
    session = requests.Session()
    session.trust_env = False
    session.verify = str(control.ca)
    session.headers["Authorization"] = f"Bearer {accounts.account_token(cluster.api, NAMESPACE)}"
    return control.url, session


def mpijob(name: str) -> JSON:
    worker = {"containers": [{"name": "worker", "image": "horovod/horovod:0.28.1"}]}
    launcher = {
        "containers": [{"name": "launcher", "image": "horovod/horovod:0.28.1", "command": ["true"]}]
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": launcher}},
                "Worker": {"replicas": 1, "template": {"spec": worker}},
            }
        },
    }


def test_version_is_kube_apiservers_v1_35_4(cluster: Emulated) -> None:
    version = cluster.api.get("/version")
    assert version is not None
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.35.4", "1", "35")


def test_openapi_v3_serves_kubeflow_org_v2beta1(cluster: Emulated) -> None:
    deadline = time.monotonic() + 30  # published a few seconds after the CRD is Established
    while "apis/kubeflow.org/v2beta1" not in (cluster.api.get("/openapi/v3") or {})["paths"]:
        assert time.monotonic() < deadline, "/openapi/v3 never listed kubeflow.org/v2beta1"
        time.sleep(0.5)
    schema = cluster.api.get("/openapi/v3/apis/kubeflow.org/v2beta1")
    assert schema is not None
    assert "org.kubeflow.v2beta1.MPIJob" in schema["components"]["schemas"]


def test_kueue_runs_with_only_the_webhooks_of_what_exists_here(cluster: Emulated) -> None:
    control = cluster.side.control
    assert control is not None
    assert control.kueue_start_seconds is not None  # start() waited for its webhooks
    served = cluster.api.get("/apis/kueue.x-k8s.io")
    assert served is not None
    assert served["preferredVersion"]["version"] == "v1beta2"
    resources = set()
    for kind in ("mutating", "validating"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations"
        configuration = cluster.api.get(f"{path}/kueue-{kind}-webhook-configuration")
        assert configuration is not None
        resources |= {
            (group, resource)
            for webhook in configuration["webhooks"]
            for rule in webhook["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        }
    assert {group for group, _ in resources} == {"kueue.x-k8s.io", "batch", "kubeflow.org"}
    assert ("batch", "jobs") in resources and ("kubeflow.org", "mpijobs") in resources


def test_the_mpi_operator_holds_its_lease(cluster: Emulated) -> None:
    control = cluster.side.control
    assert control is not None
    lease = control.wait_operator_leads()
    assert lease["metadata"]["namespace"] == LOCK_NAMESPACE
    assert lease["spec"]["holderIdentity"].split("_")[0]  # <hostname>_<uuid>


def test_each_kubelet_registered_its_node_and_renews_its_lease(cluster: Emulated) -> None:
    nodes, _ = cluster.api.list("/api/v1/nodes")
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2"]
    for node in nodes:
        allocatable = node["status"]["allocatable"]
        assert set(allocatable) >= {"cpu", "memory", "pods", "ephemeral-storage"}
        name = node["metadata"]["name"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        # The kubelet creates it once its Node is registered.
        lease = wait_for(f"{name}'s Lease", partial(cluster.api.get, path), timeout=30)
        assert lease["spec"]["holderIdentity"] == name


def test_the_rbac_example_may_create_mpijobs(cluster: Emulated) -> None:
    url, session = as_ci_runner(cluster)
    answer = session.post(
        f"{url}/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs",
        params={"dryRun": "All"},
        json=mpijob("allowed"),
        timeout=10,
    )
    assert answer.status_code == 201, answer.text


def test_the_rbac_example_may_not_list_nodes_or_create_pods(cluster: Emulated) -> None:
    url, session = as_ci_runner(cluster)
    user = f"system:serviceaccount:{NAMESPACE}:ci-runner"
    nodes = session.get(f"{url}/api/v1/nodes", timeout=10)
    assert nodes.status_code == 403
    assert nodes.json()["message"] == (
        f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "refused"},
        "spec": {"containers": [{"name": "main", "image": "horovod/horovod:0.28.1"}]},
    }
    created = session.post(f"{url}/api/v1/namespaces/{NAMESPACE}/pods", json=pod, timeout=10)
    assert created.status_code == 403
    assert created.json()["message"] == (
        f'pods is forbidden: User "{user}" cannot create resource "pods" in API group "" '
        f'in the namespace "{NAMESPACE}"'
    )


def may(cluster: Emulated, user: str, attributes: dict[str, str]) -> bool:
    """A SubjectAccessReview's answer for ``user`` (no groups but system:authenticated)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:authenticated"],
            "resourceAttributes": attributes,
        },
    }
    answer = cluster.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert answer is not None
    return bool(answer["status"].get("allowed"))


def test_the_mpi_operator_has_upstreams_cluster_role_and_no_more(cluster: Emulated) -> None:
    # testing/control_plane/rbac.py: deploy/v2beta1/mpi-operator.yaml's ClusterRole at v0.8.2.
    checks = [
        ("create", "", "pods", "", "any"),
        ("update", "kubeflow.org", "mpijobs", "status", "any"),
        ("create", "batch", "jobs", "", "any"),
        ("delete", "", "secrets", "", "any"),
        ("list", "", "nodes", "", ""),
        ("create", "rbac.authorization.k8s.io", "roles", "", "any"),
    ]
    answers = [
        may(
            cluster,
            "mpi-operator",
            {"verb": v, "group": g, "resource": r, "subresource": s, "namespace": n},
        )
        for v, g, r, s, n in checks
    ]
    assert answers == [True, True, True, False, False, False]
