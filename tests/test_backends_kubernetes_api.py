"""KubeApi: one request path, one retry policy, our own errors (never the client's)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace

import kubernetes.client
import pytest
import urllib3

from ci_runner.backends.kubernetes.api import KubeApi, ResponseStream
from ci_runner.backends.kubernetes.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
    Unreachable,
)
from ci_runner.backends.kubernetes.resources import MPIJOBS, POD_LOGS, PODS, SECRETS, job_selector
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY, RetryPolicy
from testing.fake_kube.admission import Denial, webhook_denial
from testing.fake_kube.server import CUT, FakeKubeServer
from testing.mpijob_manifests import mpijob_manifest
from testing.ports import free_port


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server


def make_api(server: FakeKubeServer, clock: ManualClock | None = None) -> KubeApi:
    client = kubernetes.client.ApiClient(server.configuration())
    return KubeApi(client, "ml", clock or ManualClock(), replace(KUBERNETES_RETRY, attempts=4))


def test_delay_doubles_up_to_the_cap_and_retry_after_wins() -> None:
    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=10.0, max_retry_after=60.0)
    assert [policy.delay(n) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert policy.delay(3, retry_after=2.0) == 2.0
    assert policy.delay(0, retry_after=3600.0) == 60.0


def test_create_get_patch_delete_round_trip(server: FakeKubeServer) -> None:
    api = make_api(server)
    created = api.create(SECRETS, {"metadata": {"name": "s"}, "stringData": {"k": "value"}})
    assert created["data"] == {"k": "dmFsdWU="}
    patched = api.patch(SECRETS, "s", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert api.get(SECRETS, "s")["metadata"]["uid"] == created["metadata"]["uid"]
    api.delete(SECRETS, "s")
    with pytest.raises(NotFound) as caught:
        api.get(SECRETS, "s")
    assert caught.value.message == 'secrets "s" not found'


def test_status_codes_map_to_our_exceptions(server: FakeKubeServer) -> None:
    api = make_api(server)
    api.create(SECRETS, {"metadata": {"name": "s"}})
    with pytest.raises(Conflict) as conflict:
        api.create(SECRETS, {"metadata": {"name": "s"}})
    assert conflict.value.status == 409
    assert conflict.value.message == 'secrets "s" already exists'
    manifest = mpijob_manifest()
    manifest["spec"]["slotsPerWorker"] = -1.5
    with pytest.raises(Invalid):
        api.create(MPIJOBS, manifest)
    server.forbid("list", "pods")
    with pytest.raises(Forbidden):
        api.list(PODS)
    server.reject_credentials()
    with pytest.raises(Unauthorized):
        api.list(SECRETS)


def test_a_burst_of_500s_is_retried_with_exponential_backoff(server: FakeKubeServer) -> None:
    clock = ManualClock()
    api = make_api(server, clock)
    server.fail_next(500, times=3, verb="list")
    assert api.list(PODS)["items"] == []
    assert clock.sleeps == [1.0, 2.0, 4.0]


def test_500s_past_the_attempts_raise_server_error(server: FakeKubeServer) -> None:
    clock = ManualClock()
    api = make_api(server, clock)
    server.fail_next(503, times=10, verb="list")
    with pytest.raises(ServerError) as caught:
        api.list(PODS)
    assert caught.value.status == 503
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert server.count("list", "pods") == 4


def test_429_honours_retry_after(server: FakeKubeServer) -> None:
    clock = ManualClock()
    api = make_api(server, clock)
    server.fail_next(429, times=2, retry_after=12, verb="get")
    with pytest.raises(NotFound):
        api.get(PODS, "nothing")
    assert clock.sleeps == [12.0, 12.0]
    server.fail_next(429, times=4, retry_after=1)
    with pytest.raises(Throttled):
        api.list(PODS)


def test_writes_are_retried_too(server: FakeKubeServer) -> None:
    clock = ManualClock()
    api = make_api(server, clock)
    server.fail_next(502, times=1, verb="create")
    api.create(SECRETS, {"metadata": {"name": "s"}})
    assert clock.sleeps == [1.0]
    assert server.count("create", "secrets") == 2


def test_unreachable_cluster_is_one_line() -> None:
    port = free_port()
    config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{port}")
    config.retries = 0
    clock = ManualClock()
    api = KubeApi(
        kubernetes.client.ApiClient(config), "ml", clock, replace(KUBERNETES_RETRY, attempts=3)
    )
    with pytest.raises(Unreachable) as caught:
        api.create(SECRETS, {"metadata": {"name": "s"}})
    assert clock.sleeps == [1.0, 2.0]
    line = str(caught.value)
    assert line.startswith(
        f"cannot reach the Kubernetes API at http://127.0.0.1:{port} to create secrets in "
        "namespace ml: "
    )
    assert line.endswith(
        "; fix: check the server address in KUBECONFIG and that the CI runner can reach it"
    )
    assert "\n" not in line
    assert "Connection refused" in line


def test_resource_paths_and_labels() -> None:
    assert PODS.path("ml") == "/api/v1/namespaces/ml/pods"
    assert MPIJOBS.path("ml", "j") == "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/j"
    assert POD_LOGS.path("ml", "p") == "/api/v1/namespaces/ml/pods/p/log"
    assert MPIJOBS.label == "mpijobs.kubeflow.org"
    assert POD_LOGS.label == "pods/log"
    assert MPIJOBS.api_version == "kubeflow.org/v2beta1"
    assert job_selector("j", "launcher") == (
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=launcher"
    )


def test_an_answer_broken_off_half_way_is_retried(server: FakeKubeServer) -> None:
    clock = ManualClock()
    api = make_api(server, clock)
    api.create(SECRETS, {"metadata": {"name": "s"}})
    server.fail_next(CUT, times=2, verb="get")
    assert api.get(SECRETS, "s")["metadata"]["name"] == "s"
    assert clock.sleeps == [1.0, 2.0]
    assert server.count("get", "secrets") == 3


def test_a_403_says_whether_rbac_a_quota_or_admission_refused(server: FakeKubeServer) -> None:
    api = make_api(server)
    refusal = webhook_denial("policy.example.com", "no latest tags")
    server.admission.denials.append(Denial("mpijobs.kubeflow.org", refusal))
    with pytest.raises(Forbidden) as webhook:
        api.create(MPIJOBS, mpijob_manifest())
    assert str(webhook.value) == (
        "Kubernetes refused to create mpijobs.kubeflow.org in namespace ml (403 Forbidden: "
        'admission webhook "policy.example.com" denied the request: no latest tags); fix: an '
        "admission policy of the cluster refused it: change what the message names, or ask the "
        "cluster's administrators about the policy"
    )
    quota = Forbidden(
        "create",
        PODS,
        "ml",
        403,
        'pods "p" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1",
    )
    assert str(quota).endswith(
        "; fix: a ResourceQuota in namespace ml is used up: wait for other jobs to finish, ask "
        "for less (workers, resources), or have the quota raised"
    )
    server.forbid("create", "secrets")
    with pytest.raises(Forbidden) as rbac:
        api.create(SECRETS, {"metadata": {"name": "s"}})
    assert str(rbac.value).endswith(
        'fix: add the RBAC rule {apiGroups: [""], resources: ["secrets"], verbs: ["create"]} to '
        "the Role bound to the CI job's identity (examples/rbac.yaml grants everything "
        "ci-runner needs)"
    )


def test_a_streams_chunks_already_received_come_joined_and_none_waits_for_the_next() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    go_on = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            conn.sendall(head + b"2\r\na\n\r\n2\r\nb\n\r\n2\r\nc\n\r\n")  # three at once
            go_on.wait(10)
            conn.sendall(b"2\r\nd\n\r\n0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pool = urllib3.PoolManager()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/log"
    response = pool.request("GET", url, preload_content=False)
    assert isinstance(response, urllib3.HTTPResponse)
    stream = ResponseStream(response, Unreachable("get", POD_LOGS, "ml", None, "broken"))
    batches = stream.batches()

    assert next(batches) == b"a\nb\nc\n"  # d is not waited for
    go_on.set()
    assert list(batches) == [b"d\n"]
    thread.join(10)
    listener.close()
