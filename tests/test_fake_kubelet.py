"""The scripted kubelet and the API server's pod log and watch behave as the real ones do."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import requests

from testing.fake_kube.admission import Denial, pod_security_denial, webhook_denial
from testing.fake_kube.scenarios import MPIJOBS, JobScenario, MpiOperator
from testing.fake_kube.server import TOKEN, FakeKubeServer
from testing.mpijob_manifests import NAMESPACE, mpijob_manifest

AUTH = {"Authorization": f"Bearer {TOKEN}"}
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


def running(server: FakeKubeServer, zone: timedelta | None = None, **options: bool) -> JobScenario:
    operator = MpiOperator(server, zone=zone)
    server.handle("create", MPIJOBS, NAMESPACE, body=mpijob_manifest("j", **options))
    job = operator.job("j", NAMESPACE)
    job.workers_running()
    job.launcher_running()
    return job


def log(server: FakeKubeServer, pod: str, **params: str) -> requests.Response:
    return requests.get(f"{server.url}{PODS}/{pod}/log", params=params, headers=AUTH, timeout=10)


def test_log_lines_carry_the_nodes_zone_and_keep_file_order(server: FakeKubeServer) -> None:
    job = running(server, zone=timedelta(hours=2))
    job.launcher_log("step 1", at=1_000_000_000)
    job.launcher_log(
        "warning: slow", stream="stderr", at=900_000_000
    )  # read later, stamped earlier
    job.launcher_log("step 2", at=1_500_000_000)
    answer = log(server, job.launcher_pod, timestamps="true")
    assert answer.text == (
        "2026-01-01T02:00:01.000000000+02:00 step 1\n"
        "2026-01-01T02:00:00.900000000+02:00 warning: slow\n"
        "2026-01-01T02:00:01.500000000+02:00 step 2\n"
    )
    cri = job.kubelet.container_log(NAMESPACE, job.launcher_pod, "launcher").file_text()
    assert cri.splitlines()[1] == "2026-01-01T02:00:00.900000000+02:00 stderr F warning: slow"
    since = log(server, job.launcher_pod, sinceTime="2026-01-01T02:00:01+02:00")
    assert since.text == "step 1\nstep 2\n"


def test_rotation_hides_older_lines_and_follow_goes_on(server: FakeKubeServer) -> None:
    job = running(server)
    job.launcher_log("a", "b")
    body: list[str] = []
    stream = requests.get(
        f"{server.url}{PODS}/{job.launcher_pod}/log",
        params={"follow": "true"},
        headers=AUTH,
        stream=True,
        timeout=10,
    )
    reader = threading.Thread(target=lambda: body.extend(stream.iter_lines(decode_unicode=True)))
    reader.start()
    server.wait_until(lambda: job.kubelet.open_streams == 1)
    job.rotate_launcher_log()
    job.launcher_log("c")
    job.launcher_exits(0)
    reader.join(timeout=10)
    assert body == ["a", "b", "c"]
    assert log(server, job.launcher_pod).text == "c\n"  # only the current file is served


def test_several_containers_need_a_container_name(server: FakeKubeServer) -> None:
    job = running(server, sidecar=True)
    job.launcher_log("hello")
    answer = log(server, job.launcher_pod)
    assert answer.status_code == 400
    assert answer.json()["message"] == (
        f"a container name must be specified for pod {job.launcher_pod}, "
        "choose one of: [launcher istio-proxy]"
    )
    assert log(server, job.launcher_pod, container="launcher").text == "hello\n"
    wrong = log(server, job.launcher_pod, container="nope")
    assert wrong.json()["message"] == f"container nope is not valid for pod {job.launcher_pod}"


def test_waiting_containers_and_previous_logs(server: FakeKubeServer) -> None:
    operator = MpiOperator(server)
    server.handle("create", MPIJOBS, NAMESPACE, body=mpijob_manifest("j", setup=True))
    job = operator.job("j", NAMESPACE)
    job.image_pull_fails("j-worker-0")
    answer = log(server, "j-worker-0", container="worker")
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        'container "worker" in pod "j-worker-0" is waiting to start: image can\'t be pulled',
    )
    job.worker_init_fails(1, "fetch-code", 128, "fatal: could not read Username")
    fetch = log(server, "j-worker-1", container="fetch-code")
    assert fetch.text == "fatal: could not read Username\n"
    previous = log(server, "j-worker-1", container="fetch-code", previous="true")
    assert previous.json()["message"] == (
        'previous terminated container "fetch-code" in pod "j-worker-1" not found'
    )


def test_watch_ends_at_timeout_seconds_with_bookmarks(server: FakeKubeServer) -> None:
    MpiOperator(server)
    lines: list[dict[str, object]] = []

    def watch() -> None:
        answer = requests.get(
            f"{server.url}{PODS}",
            params={"watch": "true", "timeoutSeconds": "150", "allowWatchBookmarks": "true"},
            headers=AUTH,
            stream=True,
            timeout=10,
        )
        lines.extend(json.loads(line) for line in answer.iter_lines() if line)

    reader = threading.Thread(target=watch)
    reader.start()
    server.wait_for_watches("pods")
    server.advance(149)
    assert reader.is_alive()
    server.advance(1)
    reader.join(timeout=10)
    assert [event["type"] for event in lines] == ["BOOKMARK", "BOOKMARK"]


def test_admission_denials_have_the_api_servers_text(server: FakeKubeServer) -> None:
    MpiOperator(server)
    server.admission.denials.append(
        Denial(
            "pods",
            pod_security_denial(
                'allowPrivilegeEscalation != false (container "worker" must set '
                "securityContext.allowPrivilegeEscalation=false)"
            ),
            times=1,
        )
    )
    server.admission.denials.append(
        Denial("pods", webhook_denial("secrets.vault.example.com", "no role"), times=1)
    )
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    first = requests.post(f"{server.url}{PODS}", json=pod, headers=AUTH, timeout=10)
    assert (first.status_code, first.json()["message"]) == (
        403,
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "worker" must set '
        "securityContext.allowPrivilegeEscalation=false)",
    )
    second = requests.post(f"{server.url}{PODS}", json=pod, headers=AUTH, timeout=10)
    assert second.json()["message"] == (
        'admission webhook "secrets.vault.example.com" denied the request: no role'
    )
    assert requests.post(f"{server.url}{PODS}", json=pod, headers=AUTH, timeout=10).ok
    missing = requests.get(f"{server.url}{PODS}/nope", headers=AUTH, timeout=10)
    assert (missing.status_code, missing.json()["message"]) == (404, 'pods "nope" not found')
