"""The in-process fake API server (testing/fake_kube/server.py) behaves as the upstream files cited
beside each rule say kube-apiserver does; what controllers do is tested on the scripted cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests

from testing.fake_kube.server import TOKEN, FakeKubeServer
from testing.mpijob_manifests import NAMESPACE, mpijob_manifest

AUTH = {"Authorization": f"Bearer {TOKEN}"}
MPIJOBS = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


def post(server: FakeKubeServer, path: str, body: dict[str, object]) -> requests.Response:
    return requests.post(server.url + path, json=body, headers=AUTH, timeout=10)


def test_invalid_against_the_crd_is_422_and_duplicate_is_409(server: FakeKubeServer) -> None:
    bad = mpijob_manifest("j")
    bad["spec"]["slotsPerWorker"] = "two"
    bad["spec"]["unknownField"] = 1  # not refused: kube-apiserver prunes it
    answer = post(server, MPIJOBS, bad)
    assert answer.status_code == 422
    assert answer.json()["reason"] == "Invalid"
    # The text kube-apiserver 1.35 answers (tests/test_backends_kubernetes_backend.py, real).
    assert answer.json()["message"] == (
        'MPIJob.kubeflow.org "j" is invalid: spec.slotsPerWorker: Invalid value: "string": '
        'spec.slotsPerWorker in body must be of type integer: "string"'
    )
    assert post(server, MPIJOBS, mpijob_manifest("j")).status_code == 201
    again = post(server, MPIJOBS, mpijob_manifest("j"))
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"


def test_controller_rules_are_not_the_api_servers(server: FakeKubeServer) -> None:
    # Two launchers break the operator's rule (pkg/apis/kubeflow/validation), not the CRD's
    # schema: kube-apiserver admits it.
    assert post(server, MPIJOBS, mpijob_manifest("j", launcher_replicas=2)).status_code == 201


def test_resource_versions_increase(server: FakeKubeServer) -> None:
    post(server, MPIJOBS, mpijob_manifest("j"))
    versions = [int(h[0]) for h in server.store.history]
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)


def test_watch_from_a_compacted_version_gets_an_error_event(server: FakeKubeServer) -> None:
    server.store.create("secrets", NAMESPACE, {"metadata": {"name": "s"}})
    server.expire_history()
    answer = requests.get(
        f"{server.url}/api/v1/namespaces/{NAMESPACE}/secrets",
        params={"watch": "true", "resourceVersion": "1"},
        headers=AUTH,
        timeout=10,
    )
    assert answer.status_code == 200
    event = json.loads(answer.text)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


def test_401_and_403_bodies(server: FakeKubeServer) -> None:
    server.forbid("list", "pods")
    answer = requests.get(f"{server.url}/api/v1/namespaces/ml/pods", headers=AUTH, timeout=10)
    assert answer.status_code == 403
    assert answer.json()["message"] == (
        'pods is forbidden: User "system:serviceaccount:ci:gitlab-runner" cannot list resource '
        '"pods" in API group "" in the namespace "ml"'
    )
    answer = requests.get(f"{server.url}/api/v1/namespaces/ml/pods", timeout=10)
    assert answer.status_code == 401


def test_strategic_merge_and_json_patches(server: FakeKubeServer) -> None:
    pods = f"{server.url}/api/v1/namespaces/{NAMESPACE}/pods"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert post(server, f"/api/v1/namespaces/{NAMESPACE}/pods", pod).status_code == 201
    first = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    requests.patch(
        f"{pods}/p/status",
        json={"status": {"conditions": first}},
        headers={**AUTH, "Content-Type": "application/merge-patch+json"},
        timeout=10,
    )
    strategic = requests.patch(
        f"{pods}/p/status",
        json={"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        headers={**AUTH, "Content-Type": "application/strategic-merge-patch+json"},
        timeout=10,
    )
    assert strategic.json()["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True"},
    ]
    operations = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    patched = requests.patch(
        f"{pods}/p",
        json=operations,
        headers={**AUTH, "Content-Type": "application/json-patch+json"},
        timeout=10,
    )
    assert patched.json()["metadata"]["labels"] == {"a": "b"}
