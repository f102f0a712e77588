"""The fake API server and MPI Operator behave as the upstream files cited beside each rule say the
real ones do."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests

from testing.fake_kube.scenarios import MpiOperator
from testing.fake_kube.server import TOKEN, FakeKubeServer, rfc3339_nano
from testing.mpijob_manifests import NAMESPACE, mpijob_manifest

AUTH = {"Authorization": f"Bearer {TOKEN}"}
MPIJOBS = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        MpiOperator(server)
        yield server


def post(server: FakeKubeServer, path: str, body: dict[str, object]) -> requests.Response:
    return requests.post(server.url + path, json=body, headers=AUTH, timeout=10)


def test_operator_creates_what_v0_8_2_creates(server: FakeKubeServer) -> None:
    assert post(server, MPIJOBS, mpijob_manifest("j", workers=2)).status_code == 201
    store = server.store
    job = store.get("mpijobs.kubeflow.org", NAMESPACE, "j")
    assert [c["type"] for c in job["status"]["conditions"]] == ["Created"]
    assert store.get("secrets", NAMESPACE, "j-ssh")
    config = store.get("configmaps", NAMESPACE, "j-config")
    assert config["data"]["hostfile"] == (
        f"j-worker-0.j.{NAMESPACE}.svc slots=1\nj-worker-1.j.{NAMESPACE}.svc slots=1\n"
    )
    assert store.get("services", NAMESPACE, "j")
    assert store.get("jobs.batch", NAMESPACE, "j-launcher")
    worker = store.get("pods", NAMESPACE, "j-worker-1")
    assert worker["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "j",
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    launcher = server.store.list(
        "pods",
        NAMESPACE,
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=launcher",
    )[0]
    assert len(launcher) == 1
    assert launcher[0]["metadata"]["name"].startswith("j-launcher-")
    assert len(launcher[0]["metadata"]["name"]) == len("j-launcher-") + 5


def test_invalid_against_the_crd_is_422_and_duplicate_is_409(server: FakeKubeServer) -> None:
    bad = mpijob_manifest("j")
    bad["spec"]["mpiImplementation"] = "LAM"
    answer = post(server, MPIJOBS, bad)
    assert answer.status_code == 422
    assert answer.json()["reason"] == "Invalid"
    assert answer.json()["message"].startswith('MPIJob.kubeflow.org "j" is invalid: ')
    assert post(server, MPIJOBS, mpijob_manifest("j")).status_code == 201
    again = post(server, MPIJOBS, mpijob_manifest("j"))
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"


def test_controller_refusal_is_only_an_event(server: FakeKubeServer) -> None:
    assert post(server, MPIJOBS, mpijob_manifest("j", launcher_replicas=2)).status_code == 201
    job = server.store.get("mpijobs.kubeflow.org", NAMESPACE, "j")
    assert "status" not in job
    events, _ = server.store.list("events", NAMESPACE)
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in events] == [
        ("Warning", "ValidationError", "MPIJob")
    ]
    assert server.store.list("pods", NAMESPACE)[0] == []


def test_resource_versions_increase(server: FakeKubeServer) -> None:
    post(server, MPIJOBS, mpijob_manifest("j"))
    versions = [int(h[0]) for h in server.store.history]
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)


def test_delete_cascades_along_owner_references(server: FakeKubeServer) -> None:
    post(server, MPIJOBS, mpijob_manifest("j"))
    answer = requests.delete(
        f"{server.url}{MPIJOBS}/j",
        json={"propagationPolicy": "Foreground"},
        headers=AUTH,
        timeout=10,
    )
    assert answer.status_code == 200
    for key in ("pods", "secrets", "configmaps", "services", "jobs.batch"):
        assert server.store.list(key, NAMESPACE)[0] == [], key


def test_orphan_keeps_dependents(server: FakeKubeServer) -> None:
    post(server, MPIJOBS, mpijob_manifest("j"))
    server.store.delete("mpijobs.kubeflow.org", NAMESPACE, "j", "Orphan")
    pod = server.store.get("pods", NAMESPACE, "j-worker-0")
    assert pod["metadata"]["ownerReferences"] == []


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


def test_log_since_time_and_timestamps() -> None:
    with FakeKubeServer() as server:
        check_log(server, MpiOperator(server))


def check_log(server: FakeKubeServer, operator: MpiOperator) -> None:
    post(server, MPIJOBS, mpijob_manifest("j"))
    job = operator.job("j", NAMESPACE)
    job.launcher_running()
    job.launcher_log("a", "b", "c", "d", "e")
    job.launcher_exits(0)
    url = f"{server.url}/api/v1/namespaces/{NAMESPACE}/pods/{job.launcher_pod}/log"
    since = rfc3339_nano(1_000_000_000)
    answer = requests.get(
        url, params={"timestamps": "true", "sinceTime": since}, headers=AUTH, timeout=10
    )
    assert answer.text == ("2026-01-01T00:00:01.000000000Z d\n2026-01-01T00:00:01.250000000Z e\n")
    plain = requests.get(url, headers=AUTH, timeout=10)
    assert plain.text == "a\nb\nc\nd\ne\n"


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


def test_a_kubelet_of_its_own_plugs_in_through_the_api(tmp_path: object) -> None:
    """The cluster interface of BRIEF.md, spoken over HTTP by a kubelet that is not ours: it
    registers a Node, watches the pods bound to it, writes status through the subresource,
    serves /containerLogs for the API server's log proxy, deletes pods with grace 0."""
    import http.server
    import threading

    from testing.fake_kube.control_plane import ControlPlane

    class Logs(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = f"{self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    kubelet = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Logs)
    threading.Thread(target=kubelet.serve_forever, daemon=True).start()
    try:
        with FakeKubeServer() as server:
            ControlPlane(server, scripted_kubelet=False)
            node = {
                "metadata": {"name": "n1"},
                "status": {
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.server_address[1]}},
                },
            }
            assert post(server, "/api/v1/nodes", node).status_code == 201
            pod = {
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
            assert post(server, f"/api/v1/namespaces/{NAMESPACE}/pods", pod).status_code == 201
            pods = f"{server.url}/api/v1/namespaces/{NAMESPACE}/pods"
            mine = requests.get(
                pods, params={"fieldSelector": "spec.nodeName=n1"}, headers=AUTH, timeout=10
            ).json()["items"]
            assert [p["metadata"]["name"] for p in mine] == ["p"]  # the scheduler bound it
            status = {"status": {"phase": "Running"}}
            patched = requests.patch(
                f"{pods}/p/status",
                json=status,
                headers={**AUTH, "Content-Type": "application/merge-patch+json"},
                timeout=10,
            )
            assert patched.json()["status"]["phase"] == "Running"
            logs = requests.get(
                f"{pods}/p/log", params={"follow": "true"}, headers=AUTH, timeout=10
            )
            assert logs.text == f"/containerLogs/{NAMESPACE}/p/c?follow=true\n"
            first = requests.delete(f"{pods}/p", headers=AUTH, timeout=10).json()
            assert first["metadata"]["deletionGracePeriodSeconds"] == 30
            again = post(server, f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
            assert (again.status_code, again.json()["message"]) == (
                409,
                'object is being deleted: pods "p" already exists',
            )
            gone = requests.delete(
                f"{pods}/p", json={"gracePeriodSeconds": 0}, headers=AUTH, timeout=10
            )
            assert gone.json()["status"] == "Success"
            assert server.store.find("pods", NAMESPACE, "p") is None
    finally:
        kubelet.shutdown()
        kubelet.server_close()


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
