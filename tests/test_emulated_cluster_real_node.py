"""Real nodes under the emulated cluster: kubelet v1.35.4 with Debian's containerd, runc and CNI
plugins (testing/emulated_cluster/realcluster.py), observed through the API as ci-runner sees
them (slow: real pods; root)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ci_runner.backends.kubernetes import explain
from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.connect import connect_cluster
from ci_runner.backends.kubernetes.launcher_log import LauncherLogStream
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import SystemClock
from ci_runner.settings import read_settings
from testing.emulated_cluster import cleanup, hoststate
from testing.emulated_cluster.harness import (
    ABSENT,
    NAMESPACE,
    Emulated,
    busybox,
    condition,
    emulated,
    is_ready,
    main_status,
    phase_is,
    pod,
)
from testing.host import marks, network
from testing.waiting import wait_for

pytestmark = pytest.mark.slow
# Accepts one connection and prints the peer's address and what it sent.
PEER_SERVER = """
import socket
server = socket.create_server(("198.51.100.2", 8080))
print("listening", flush=True)
server.settimeout(30)
conn, (address, _) = server.accept()
print(address, conn.recv(100).decode().strip(), flush=True)
"""
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def sysctls() -> dict[str, str]:
    """The machine's values before the cluster started."""
    return hoststate.read()


@pytest.fixture(scope="module")
def cluster(sysctls: dict[str, str]) -> Iterator[Emulated]:
    with emulated(nodes=2) as running:
        yield running


def ended(cluster: Emulated, name: str, *containers: JSON, node: str = "node-1") -> JSON:
    cluster.create("pods", pod(name, node, list(containers), restartPolicy="Never"))
    return cluster.wait_pod(name, phase_is("Succeeded", "Failed"), timeout=60)


def test_the_nodes_are_kubelet_v1_35_4_on_containerd_shaped_by_system_reserved(
    cluster: Emulated,
) -> None:
    items, _ = cluster.api.list("/api/v1/nodes")
    assert [n["metadata"]["name"] for n in items] == ["node-1", "node-2"]
    for node in items:
        info = node["status"]["nodeInfo"]
        assert (info["kubeletVersion"], info["containerRuntimeVersion"]) == (
            "v1.35.4",
            "containerd://1.6.20",
        )
        assert (node["status"]["allocatable"]["cpu"], node["status"]["allocatable"]["memory"]) == (
            "2",
            "8Gi",
        )
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] in marks.NODE_ADDRESSES


def test_a_pod_runs_in_containerd_with_an_address_of_its_node_and_logs_through_the_kubelet(
    cluster: Emulated,
) -> None:
    done = ended(
        cluster,
        "hello",
        busybox("main", "sh", "-c", "echo hello from $(hostname); cat /etc/resolv.conf"),
        node="node-2",
    )
    status = main_status(done)
    assert status["containerID"].startswith("containerd://")
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert done["status"]["podIP"].startswith(f"{marks.SUBNET}.")
    assert 64 < int(done["status"]["podIP"].rsplit(".", 1)[1]) < 96  # node-2's pod CIDR
    log = cluster.api.text("/api/v1/namespaces/ml/pods/hello/log")
    assert log.splitlines() == [
        "hello from hello",
        f"search ml.svc.{marks.CLUSTER_DOMAIN} svc.{marks.CLUSTER_DOMAIN} {marks.CLUSTER_DOMAIN}",
        f"nameserver {marks.GATEWAY}",
        "options ndots:5",
    ]


def ci_runner_api(cluster: Emulated, tmp_path: Path) -> KubeApi:
    """ci-runner's client with only examples/rbac.yaml's token."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(cluster.ci_runner_kubeconfig()))
    connection = connect_cluster(
        None, read_settings({"KUBECONFIG": str(kubeconfig)}).kube, tmp_path / "no-sa"
    )
    return KubeApi(connection.client, connection.namespace, SystemClock())


def test_ci_runner_s_client_with_only_the_rbac_example_s_token_follows_a_log_as_it_is_written(
    cluster: Emulated, tmp_path: Path
) -> None:
    """kube-apiserver proxies ``pods/log?follow=true`` to the real kubelet's HTTPS port: the first
    line arrives while the container still runs."""
    api = ci_runner_api(cluster, tmp_path)
    script = "echo first; sleep 4; echo second"
    cluster.create(
        "pods",
        pod("streamer", "node-1", [busybox("launcher", "sh", "-c", script)], restartPolicy="Never"),
    )
    cluster.wait_pod("streamer", phase_is("Running"))
    received = b""
    running_at_first = None
    for chunk in api.follow_log("streamer").chunks():
        received += chunk
        if running_at_first is None and b" first\n" in received:
            running_at_first = (cluster.pod("streamer") or {})["status"]["phase"] == "Running"
    assert running_at_first is True
    lines = [line.split(" ", 1) for line in received.decode().splitlines()]
    assert [text for _, text in lines] == ["first", "second"]
    assert all(stamp.startswith("20") for stamp, _ in lines)


def test_a_last_line_without_a_newline_reaches_the_ci_log_whole(
    cluster: Emulated, tmp_path: Path
) -> None:
    """containerd keeps a last line that has no newline as a partial record; ci-runner's launcher
    log follower passes it on as the container's last words, not as a break to resume."""
    api = ci_runner_api(cluster, tmp_path)
    script = "echo one; printf 'last words'; exit 1"
    ended(cluster, "last-words", busybox("launcher", "sh", "-c", script))
    echoed: list[str] = []
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    LauncherLogStream(api, "last-words", sink).run()
    sink.close()
    assert "".join(echoed) == "one\nlast words\n"


def test_a_deleted_pod_ends_the_log_being_followed(cluster: Emulated, tmp_path: Path) -> None:
    """The kubelet stops the container of a deleted pod (SIGKILL after its grace period: sleep as
    the first process ignores SIGTERM); the follow ends with it and the follower stops."""
    api = ci_runner_api(cluster, tmp_path)
    sleeper = busybox("launcher", "sh", "-c", "echo one; exec sleep 600")
    cluster.create(
        "pods",
        pod("deleted", "node-1", [sleeper], restartPolicy="Never", terminationGracePeriodSeconds=1),
    )
    cluster.wait_pod("deleted", phase_is("Running"))
    echoed: list[str] = []
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    follower = threading.Thread(target=LauncherLogStream(api, "deleted", sink).run, daemon=True)
    follower.start()
    wait_for("the follower's first line", lambda: bool(echoed))
    cluster.api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/deleted")
    follower.join(30)
    assert not follower.is_alive()
    sink.close()
    assert echoed == ["one\n"]


def test_a_container_not_started_yet_is_waited_for(cluster: Emulated, tmp_path: Path) -> None:
    """Behind an init container the kubelet answers a log request with 400 "is waiting to
    start"; ci-runner's follower waits and reads the log once the container runs."""
    api = ci_runner_api(cluster, tmp_path)
    cluster.create(
        "pods",
        pod(
            "late",
            "node-1",
            [busybox("launcher", "echo", "hello")],
            initContainers=[busybox("setup", "sleep", "3")],
            restartPolicy="Never",
        ),
    )
    echoed: list[str] = []
    sink = LogSink(tmp_path / "log.txt", echoed.append)
    log = LauncherLogStream(api, "late", sink)
    log.run()
    sink.close()
    assert echoed == ["hello\n"]
    assert log.reconnects >= 1


def test_a_readiness_probe_that_fails_leaves_the_worker_running_not_ready(
    cluster: Emulated,
) -> None:
    """What ci-runner says of a worker when setup_timeout runs out, read from the real kubelet's
    status of a container whose readiness probe always fails."""
    probe = {"exec": {"command": ["false"]}, "periodSeconds": 1}
    worker = busybox("worker", "sleep", "600", readinessProbe=probe)
    cluster.create(
        "pods",
        pod("never-worker-1", "node-1", [worker], terminationGracePeriodSeconds=1),
    )
    running = cluster.wait_pod(
        "never-worker-1",
        lambda p: (
            "running" in main_status(p).get("state", {})
            and condition(p, "ContainersReady") == "False"
        ),
    )
    wait_for(
        "the kubelet's Event of a failed probe",
        lambda: "Unhealthy" in dict(cluster.events("never-worker-1")),
    )
    still = cluster.pod("never-worker-1")
    assert still is not None and not main_status(still)["ready"]
    failure = explain.setup_timeout_failure(still, 600)
    assert failure.message == (
        "worker never-worker-1 was not Ready after 600s of setup (kubernetes.setup_timeout): "
        "container worker still running, not Ready"
    )
    assert running["metadata"]["uid"] == still["metadata"]["uid"]
    cluster.api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/never-worker-1")


def test_a_command_the_image_lacks_ends_start_error_in_runc_s_words(cluster: Emulated) -> None:
    done = ended(cluster, "worker-0", busybox("worker", "/opt/conda/bin/python", "train.py"))
    end = main_status(done)["state"]["terminated"]
    assert (end["reason"], end["exitCode"]) == ("StartError", 128)
    runc = (
        'exec: "/opt/conda/bin/python": stat /opt/conda/bin/python: no such file or directory: '
        "unknown"
    )
    assert end["message"].endswith(runc), end["message"]
    failure = explain.setup_failure(done)
    assert failure is not None
    assert failure.message == (
        "worker worker-0: container worker could not start (StartError, exit code 128): "
        f"{end['message']}; fix: use an image that has /bin/sh and the command (ci-runner's "
        "containers run their scripts with /bin/sh)"
    )


def waiting(pod: JSON) -> JSON:
    return dict(main_status(pod).get("state", {}).get("waiting") or {})


def test_an_image_no_registry_serves_fails_to_pull_then_backs_off_in_the_kubelet_s_words(
    cluster: Emulated,
) -> None:
    """What ci-runner reads of a pull that fails (explain.image_pull_failure): ErrImagePull with
    containerd's error, then ImagePullBackOff carrying that error after the kubelet's words
    (images/image_manager.go)."""
    container = {"name": "main", "image": ABSENT, "command": ["true"]}
    cluster.create("pods", pod("pull-fails", "node-1", [container], restartPolicy="Never"))
    pulling = cluster.wait_pod("pull-fails", lambda p: waiting(p).get("reason") == "ErrImagePull")
    error = waiting(pulling)["message"]
    assert error == (
        f'failed to pull and unpack image "{ABSENT}": failed to resolve reference "{ABSENT}": '
        'failed to do request: Head "http://127.0.0.1:1/v2/ci-runner/absent/manifests/1": '
        "dial tcp 127.0.0.1:1: connect: connection refused"
    )
    failure = explain.image_pull_failure(pulling)
    assert failure is not None
    assert failure.message == (f"pod pull-fails cannot pull image {ABSENT} (ErrImagePull): {error}")
    backing_off = cluster.wait_pod(
        "pull-fails", lambda p: waiting(p).get("reason") == "ImagePullBackOff"
    )
    assert waiting(backing_off)["message"] == (
        f'Back-off pulling image "{ABSENT}": ErrImagePull: {error}'
    )


def test_a_process_over_the_memory_limit_is_oom_killed_and_the_container_keeps_its_exit_code(
    cluster: Emulated,
) -> None:
    """cgroup v1: the kernel kills the process over the limit, not the container (no
    ``memory.oom.group`` here); the runtime says OOMKilled with the code the shell exits with.
    One process allocates: with a pipe, its writer's buffers can call the OOM killer again
    before the first victim's memory is freed, and that second kill may take the shell."""
    limits = {"resources": {"limits": {"memory": "32Mi"}}}
    hog = busybox("worker", "sh", "-c", "tail /dev/zero; exit 5", **limits)
    done = ended(cluster, "hog-worker-0", hog)
    end = main_status(done)["state"]["terminated"]
    assert (end["reason"], end["exitCode"]) == ("OOMKilled", 5)
    failure = explain.setup_failure(done)
    assert failure is not None
    assert failure.message == (
        "worker hog-worker-0: container worker was OOMKilled (exit code 5, memory limit 32Mi)"
    )


def test_an_init_container_whose_own_process_goes_over_its_limit_ends_oom_killed_137(
    cluster: Emulated,
) -> None:
    """The killed process is the container's first (``exec``): the container ends with it,
    OOMKilled and 137 on cgroup v1 too, and ci-runner names the setup step."""
    limits = {"resources": {"limits": {"memory": "32Mi"}}}
    setup = busybox("install-requirements", "sh", "-c", "exec tail /dev/zero", **limits)
    cluster.create(
        "pods",
        pod(
            "setup-worker-0",
            "node-1",
            [busybox("worker", "true")],
            initContainers=[setup],
            restartPolicy="Never",
        ),
    )
    done = cluster.wait_pod("setup-worker-0", phase_is("Failed"), timeout=60)
    end = done["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert (end["reason"], end["exitCode"]) == ("OOMKilled", 137)
    failure = explain.setup_failure(done)
    assert failure is not None
    assert failure.message == (
        "worker setup-worker-0: init container install-requirements was OOMKilled "
        "(exit code 137, memory limit 32Mi)"
    )


def test_coredns_answers_for_services_and_the_pods_of_a_headless_service(
    cluster: Emulated,
) -> None:
    """The records MPI Operator's hostfile relies on: ``<pod>.<service>.<ns>.svc.<domain>`` for
    a pod whose ``hostname`` and ``subdomain`` name it and a headless Service that selects it."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "sub"},
        "spec": {"clusterIP": "None", "selector": {"app": "target"}, "ports": [{"port": 22}]},
    }
    cluster.create("services", service)
    target = pod("target", "node-2", [busybox("main", "sleep", "600")], labels={"app": "target"})
    target["spec"].update(hostname="w-0", subdomain="sub")
    cluster.create("pods", target)
    running = cluster.wait_pod("target", lambda p: is_ready(p), timeout=60)
    domain = marks.CLUSTER_DOMAIN
    lookup = (
        f"for n in kubernetes.default.svc.{domain} w-0.sub.ml.svc.{domain}; do "
        "nslookup -type=a $n | sed -n 's/^Address: //p'; done"
    )
    done = ended(cluster, "lookup", busybox("main", "sh", "-c", lookup))
    log = cluster.api.text("/api/v1/namespaces/ml/pods/lookup/log")
    assert (done["status"]["phase"], log.split()) == (
        "Succeeded",
        [marks.KUBERNETES_SERVICE_IP, running["status"]["podIP"]],
    )


def test_a_pod_reaches_a_network_beyond_the_bridge_masqueraded_as_this_machine(
    cluster: Emulated,
) -> None:
    """An "outside" network namespace joined to this machine only (198.51.100.0/24, no route
    to the pods): a pod's connection gets there through this machine, from its address."""
    outside, veth = f"{marks.NETNS_PREFIX}outside", f"{marks.VETH_PREFIX}outside"
    network.ip("netns", "add", outside)
    try:
        network.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", outside)
        network.ip("addr", "add", "198.51.100.1/24", "dev", veth)
        network.ip("link", "set", veth, "up")
        inside = ("netns", "exec", outside, "ip")
        network.ip(*inside, "addr", "add", "198.51.100.2/24", "dev", "eth0")
        network.ip(*inside, "link", "set", "eth0", "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", outside, sys.executable, "-c", PEER_SERVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline() == "listening\n"
            call = busybox("main", "sh", "-c", "echo hello | nc -w 5 198.51.100.2 8080")
            done = ended(cluster, "caller", call)
            peer, _ = server.communicate(timeout=10)
        finally:
            server.kill()
        assert (done["status"]["phase"], peer) == ("Succeeded", "198.51.100.1 hello\n")
    finally:
        network.ip("netns", "del", outside, check=False)


def test_a_worker_on_a_lost_node_is_deleted_by_the_taint_and_named_as_stopped_by_the_cluster(
    cluster: Emulated,
) -> None:
    """node-2's kubelet and containerd stop (its pods' processes go on, as behind a network
    partition): its Lease goes unrenewed, the node lifecycle controller sets Ready Unknown and
    the unreachable taint, and the taint eviction controller deletes the worker (the apiserver's
    default toleration of it, 5 s here). Next to last in this module: node-2 stays lost."""
    worker = busybox("worker", "sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait")
    cluster.create("pods", pod("lost-worker-0", "node-2", [worker]))
    cluster.wait_pod("lost-worker-0", phase_is("Running"))
    assert cluster.side.real_nodes is not None
    cluster.side.real_nodes.nodes[1].stop()
    gone = cluster.wait_pod(
        "lost-worker-0", lambda p: bool(p["metadata"].get("deletionTimestamp")), timeout=90
    )
    node = cluster.api.get("/api/v1/nodes/node-2") or {}
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"} in [
        {k: t[k] for k in ("key", "effect")} for t in node["spec"]["taints"]
    ]
    disrupted = explain.disruption(gone)
    assert disrupted is not None
    assert disrupted.message == (
        "worker lost-worker-0 was stopped by the cluster (DeletionByTaintManager: Taint manager: "
        "deleting due to NoExecute taint); the launcher then failed"
    )
    # No kubelet confirms the end: the pod stays Running, being deleted, with its node.
    assert gone["status"]["phase"] == "Running"


def test_after_stop_nothing_is_left_and_the_sysctls_are_back(
    cluster: Emulated, sysctls: dict[str, str]
) -> None:
    """Last in this module: it stops the module's cluster, with a pod still running."""
    cluster.create("pods", pod("sleeper", "node-1", [busybox("main", "sleep", "600")]))
    cluster.wait_pod("sleeper", phase_is("Running"))
    assert hoststate.read()["vm.overcommit_memory"] == "1"  # the kubelet's
    cluster.stop()
    assert cluster.side.left_behind == {key: [] for key in cluster.side.left_behind or {}}
    assert cleanup.inventory() == {key: [] for key in cleanup.inventory()}
    assert hoststate.read() == sysctls
