"""Pods on the emulated nodes run as real processes with a node's semantics (slow: real pods)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.emulated_cluster import marks
from testing.emulated_cluster.harness import (
    NAMESPACE,
    Emulated,
    condition,
    container,
    emulated,
    is_ready,
    main_status,
    phase_is,
    pod,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Emulated]:
    with emulated(nodes=2) as running:
        yield running


def test_init_containers_run_in_order_then_a_readiness_probe_turns_the_pod_ready(
    cluster: Emulated,
) -> None:
    cluster.create(
        "pods",
        pod(
            "ordered",
            "node-1",
            [
                container(
                    "main",
                    "sh",
                    "-c",
                    "cat /shared/order; exec sleep 60",
                    volumeMounts=[{"name": "shared", "mountPath": "/shared"}],
                    readinessProbe={
                        "exec": {"command": ["cat", "/tmp/ready"]},
                        "periodSeconds": 1,
                    },
                )
            ],
            initContainers=[
                container(
                    name,
                    "sh",
                    "-c",
                    f"echo {name} >> /shared/order",
                    volumeMounts=[{"name": "shared", "mountPath": "/shared"}],
                )
                for name in ("first", "second")
            ],
            volumes=[{"name": "shared", "emptyDir": {}}],
        ),
    )
    running = cluster.wait_pod("ordered", phase_is("Running"))
    assert [
        s["state"]["terminated"]["reason"] for s in running["status"]["initContainerStatuses"]
    ] == [
        "Completed",
        "Completed",
    ]
    assert condition(running, "Initialized") == "True"
    failed = ("Unhealthy", "Readiness probe failed: cat: /tmp/ready: No such file or directory")
    deadline = time.time() + 10
    while failed not in cluster.events("ordered"):
        assert time.time() < deadline, cluster.events("ordered")
        time.sleep(0.1)
    assert condition(cluster.wait_pod("ordered", phase_is("Running")), "Ready") == "False"

    cluster.exec("ordered", "main", ["touch", "/tmp/ready"])
    ready = cluster.wait_pod("ordered", is_ready)
    assert condition(ready, "ContainersReady") == "True"
    logs = cluster.kubelet_get(1, "/containerLogs/ml/ordered/main")
    assert logs.text == "first\nsecond\n"


def _resolv(cluster: Emulated, name: str, **spec: object) -> str:
    cluster.create("pods", pod(name, "node-2", [container("main", "sleep", "60")], **spec))
    cluster.wait_pod(name, phase_is("Running"))
    code, text = cluster.exec(name, "main", ["cat", "/etc/resolv.conf"])
    assert code == 0, text
    return text


def test_resolv_conf_is_written_as_the_kubelet_writes_it(cluster: Emulated) -> None:
    assert _resolv(cluster, "dns-first") == (
        "search ml.svc.cluster.local svc.cluster.local cluster.local\n"
        f"nameserver {marks.GATEWAY}\n"
        "options ndots:5\n"
    )
    none = _resolv(
        cluster,
        "dns-none",
        dnsPolicy="None",
        dnsConfig={"nameservers": [marks.GATEWAY], "options": [{"name": "ndots", "value": "2"}]},
    )
    assert none == f"nameserver {marks.GATEWAY}\noptions ndots:2\n"
    host = Path("/etc/resolv.conf").read_text().split("\n")
    servers = [line.split()[1] for line in host if line.startswith("nameserver ")]
    assert _resolv(cluster, "dns-default", dnsPolicy="Default") == "".join(
        f"nameserver {server}\n" for server in servers
    )


def test_only_cluster_first_resolves_a_hostfile_name_and_only_ready_pods_are_published(
    cluster: Emulated,
) -> None:
    cluster.create(
        "services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "j"},
            "spec": {"clusterIP": "None", "selector": {"job": "j"}},
        },
    )
    for index, probe in ((0, ["true"]), (1, ["false"])):
        cluster.create(
            "pods",
            pod(
                f"j-worker-{index}",
                f"node-{index + 1}",
                [container("worker", "sleep", "60", readinessProbe={"exec": {"command": probe}})],
                hostname=f"j-worker-{index}",
                subdomain="j",
                labels={"job": "j"},
            ),
        )
    worker = cluster.wait_pod("j-worker-0", is_ready)
    cluster.wait_pod("j-worker-1", phase_is("Running"))
    for name, spec in (
        ("client-first", {}),
        ("client-none", {"dnsPolicy": "None", "dnsConfig": {"nameservers": [marks.GATEWAY]}}),
    ):
        cluster.create("pods", pod(name, "node-2", [container("main", "sleep", "60")], **spec))
        cluster.wait_pod(name, phase_is("Running"))

    code, text = cluster.exec("client-first", "main", ["getent", "hosts", "j-worker-0.j.ml.svc"])
    assert (code, text.split()) == (
        0,
        [worker["status"]["podIP"], "j-worker-0.j.ml.svc.cluster.local"],
    )
    code, text = cluster.exec("client-none", "main", ["getent", "hosts", "j-worker-0.j.ml.svc"])
    assert (code, text) == (2, "")
    fqdn = "j-worker-0.j.ml.svc.cluster.local"
    code, text = cluster.exec("client-none", "main", ["getent", "hosts", fqdn])
    assert (code, text.split()) == (0, [worker["status"]["podIP"], fqdn])
    code, text = cluster.exec("client-first", "main", ["getent", "hosts", "j-worker-1.j.ml.svc"])
    assert (code, text) == (2, "")  # running but never Ready: not published


def test_secret_volume_is_a_tmpfs_with_the_kubelet_layout_and_modes(cluster: Emulated) -> None:
    cluster.create(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "keys"},
            "stringData": {"private": "PRIVATE\n", "public": "PUBLIC\n"},
        },
    )
    volume = {
        "secretName": "keys",
        "defaultMode": 0o600,
        "items": [
            {"key": "private", "path": "id"},
            {"key": "public", "path": "id.pub", "mode": 0o644},
        ],
    }
    cluster.create(
        "pods",
        pod(
            "secret-layout",
            "node-1",
            [
                container(
                    "main", "sleep", "60", volumeMounts=[{"name": "ssh", "mountPath": "/root/.ssh"}]
                )
            ],
            volumes=[{"name": "ssh", "secret": volume}],
        ),
    )
    cluster.wait_pod("secret-layout", phase_is("Running"))

    def run(*argv: str) -> str:
        code, text = cluster.exec("secret-layout", "main", list(argv))
        assert code == 0, text
        return text.strip()

    assert run("stat", "-f", "-c", "%T", "/root/.ssh") == "tmpfs"
    assert run("stat", "-c", "%a %U", "/root/.ssh") == "1777 root"
    assert run("ls", "-A", "/root/.ssh").split()[1:] == ["..data", "id", "id.pub"]
    timestamped = run("readlink", "/root/.ssh/..data")
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+", timestamped)
    assert run("ls", "-A", "/root/.ssh").split()[0] == timestamped
    assert run("stat", "-c", "%a", f"/root/.ssh/{timestamped}") == "755"
    assert run("readlink", "/root/.ssh/id") == "..data/id"
    assert run("stat", "-L", "-c", "%a", "/root/.ssh/id", "/root/.ssh/id.pub").split() == [
        "600",
        "644",
    ]
    assert run("cat", "/root/.ssh/id") == "PRIVATE"
    code, text = cluster.exec("secret-layout", "main", ["touch", "/root/.ssh/known_hosts"])
    assert code == 1 and "Read-only file system" in text


def test_a_memory_limit_ends_in_oom_killed_exit_137(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod(
            "hungry",
            "node-2",
            [
                container(
                    "main",
                    "python",
                    "-c",
                    "b = b'x' * (512 * 1024 * 1024)",
                    resources={"limits": {"memory": "128Mi"}},
                )
            ],
            restartPolicy="Never",
        ),
    )
    failed = cluster.wait_pod("hungry", phase_is("Failed", "Succeeded"))
    terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (failed["status"]["phase"], terminated["reason"], terminated["exitCode"]) == (
        "Failed",
        "OOMKilled",
        137,
    )


CRI_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d) (stdout|stderr) [FP] (.*)$"
)


def test_container_logs_are_cri_files_served_with_the_kubelet_semantics(cluster: Emulated) -> None:
    script = "echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; printf partial"
    cluster.create(
        "pods",
        pod("logs", "node-1", [container("main", "sh", "-c", script)], restartPolicy="Never"),
    )
    done = cluster.wait_pod("logs", phase_is("Succeeded"))
    uid = done["metadata"]["uid"]
    files = list(marks.STATE_ROOT.glob(f"nodes/node-1/logs/ml_logs_{uid}/main/0.log"))
    lines = files[0].read_text().splitlines()
    parsed = [CRI_LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m[3], m[4]) for m in parsed if m] == [
        ("stdout", "out1"),
        ("stderr", "err1"),
        ("stdout", "partial"),
    ]

    def get(query: str, container_name: str = "main") -> requests.Response:
        return cluster.kubelet_get(1, f"/containerLogs/ml/logs/{container_name}?{query}")

    assert get("").text == "out1\nerr1\npartial\n"
    assert get("tailLines=1").text == "partial\n"
    assert get("limitBytes=3").text == "out"
    stamped = get("timestamps=true").text.splitlines()
    assert all(re.fullmatch(r"\S+\.\d{9}(Z|[+-]\d\d:\d\d) \S+", line) for line in stamped)
    since = stamped[1].split()[0]
    assert get(f"sinceTime={since}").text == "err1\npartial\n"
    previous = get("previous=true")
    assert (previous.status_code, previous.text) == (
        400,
        'previous terminated container "main" in pod "logs" not found',
    )
    missing = get("", "sidecar")
    assert (missing.status_code, missing.text) == (
        404,
        'container "sidecar" not found in pod "logs"\n',
    )


def test_env_reads_secrets_config_maps_fields_and_expands_earlier_variables(
    cluster: Emulated,
) -> None:
    cluster.create(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "stringData": {"token": "s3cr3t"},
        },
    )
    cluster.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"mode": "fast"},
        },
    )
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "SAY", "value": "$(MODE) $$(MODE) $(UNKNOWN)"},
    ]
    script = 'echo "$TOKEN|$MODE|$IP|$NODE|$SAY|$HOSTNAME|$PWD"'
    cluster.create(
        "pods",
        pod(
            "env", "node-2", [container("main", "sh", "-c", script, env=env)], restartPolicy="Never"
        ),
    )
    done = cluster.wait_pod("env", phase_is("Succeeded", "Failed"))
    text = cluster.kubelet_get(2, "/containerLogs/ml/env/main").text
    assert text == (
        f"s3cr3t|fast|{done['status']['podIP']}|node-2|fast $(MODE) $(UNKNOWN)|env"
        "|/horovod/examples\n"
    )


def test_a_missing_secret_key_keeps_the_container_in_create_container_config_error(
    cluster: Emulated,
) -> None:
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}]
    cluster.create("pods", pod("no-key", "node-1", [container("main", "true", env=env)]))
    waiting = cluster.wait_pod(
        "no-key",
        lambda p: (
            main_status(p).get("state", {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
    )
    assert waiting["status"]["phase"] == "Pending"
    assert waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == (
        "couldn't find key nope in Secret ml/creds"
    )
    assert ("Failed", "Error: couldn't find key nope in Secret ml/creds") in cluster.events(
        "no-key"
    )


def test_on_failure_restarts_at_once_then_backs_off(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod(
            "crash", "node-1", [container("main", "sh", "-c", "exit 3")], restartPolicy="OnFailure"
        ),
    )
    backing_off = cluster.wait_pod(
        "crash",
        lambda p: main_status(p).get("restartCount") == 2,
    )
    status = backing_off["status"]["containerStatuses"][0]
    uid = backing_off["metadata"]["uid"]
    assert backing_off["status"]["phase"] == "Running"
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["state"] == {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": f"back-off 10s restarting failed container=main pod=crash_ml({uid})",
        }
    }


def claim_pods(cluster: Emulated, claim: str, modes: list[str]) -> None:
    cluster.create(
        "persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    for index in (1, 2):
        mount = [{"name": "cache", "mountPath": "/cache"}]
        script = f"echo {index} > /cache/from-{index}; exec sleep 60"
        cluster.create(
            "pods",
            pod(
                f"{claim}-{index}",
                f"node-{index}",
                [container("main", "sh", "-c", script, volumeMounts=mount)],
                volumes=[{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}],
            ),
        )
        if index == 1:
            cluster.wait_pod(f"{claim}-1", phase_is("Running"))


def test_a_read_write_once_claim_leaves_the_second_nodes_pod_container_creating(
    cluster: Emulated,
) -> None:
    claim_pods(cluster, "rwo", ["ReadWriteOnce"])
    message = 'Multi-Attach error for volume "rwo" Volume is already used by pod(s) rwo-1'
    deadline = time.time() + 10
    while ("FailedAttachVolume", message) not in cluster.events("rwo-2"):
        assert time.time() < deadline, cluster.events("rwo-2")
        time.sleep(0.1)
    stuck = cluster.pod("rwo-2")
    assert stuck is not None
    assert stuck["status"]["phase"] == "Pending"
    assert main_status(stuck)["state"] == {"waiting": {"reason": "ContainerCreating"}}


def test_a_read_write_many_claim_is_shared_by_pods_on_both_nodes(cluster: Emulated) -> None:
    claim_pods(cluster, "rwx", ["ReadWriteMany"])
    cluster.wait_pod("rwx-2", phase_is("Running"))
    wait_then_read = (
        "until [ -s /cache/from-2 ]; do sleep 0.05; done; cat /cache/from-1 /cache/from-2"
    )
    code, text = cluster.exec("rwx-2", "main", ["sh", "-c", wait_then_read])
    assert (code, text) == (0, "1\n2\n")


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(cluster: Emulated) -> None:
    polite = "trap 'exit 0' TERM; while :; do sleep 0.1; done"
    for name, argv in (("polite", ["sh", "-c", polite]), ("stubborn", ["sleep", "600"])):
        cluster.create("pods", pod(name, "node-1", [container("main", *argv)]))
        running = cluster.wait_pod(name, phase_is("Running"))
        assert running["metadata"]["uid"]
        cluster.api.delete(f"/api/v1/namespaces/ml/pods/{name}", {"gracePeriodSeconds": 2})
    finals = {}
    for name in ("polite", "stubborn"):
        cluster.wait_gone(name)
        history = cluster.history(name)
        final = history[-1]["status"]
        finals[name] = (final["phase"], main_status(history[-1])["state"]["terminated"]["exitCode"])
        assert ("Killing", "Stopping container main") in cluster.events(name)
    assert finals == {"polite": ("Succeeded", 0), "stubborn": ("Failed", 137)}


def test_the_kubelet_signals_the_containers_pid_1(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod(
            "pid-one",
            "node-1",
            [container("main", "sleep", "600")],
            initContainers=[container("quick", "true")],
            terminationGracePeriodSeconds=0,
        ),
    )
    cluster.wait_pod("pid-one", phase_is("Running"))
    worker = cluster.side.kubelets[0].find(NAMESPACE, "pid-one")
    assert worker is not None
    process = worker.slots[0].process
    assert process is not None and process.pid is not None
    status = Path(f"/proc/{process.pid}/status").read_text()
    nspids = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
    assert (nspids[-1], Path(f"/proc/{process.pid}/cmdline").read_bytes()) == (
        "1",
        b"sleep\x00600\x00",
    )
    cluster.api.delete("/api/v1/namespaces/ml/pods/pid-one")
    cluster.wait_gone("pid-one")


def test_a_command_not_in_the_image_ends_start_error_128_with_the_runtimes_words(
    cluster: Emulated,
) -> None:
    cluster.create(
        "pods",
        pod("no-such", "node-1", [container("main", "no-such-command")], restartPolicy="Never"),
    )
    final = cluster.wait_pod("no-such", phase_is("Failed"))
    terminated = main_status(final)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        128,
        "StartError",
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        'runc create failed: unable to start container process: exec: "no-such-command": '
        "executable file not found in $PATH: unknown",
    )


def test_following_a_log_streams_until_the_container_exits(cluster: Emulated) -> None:
    script = "echo first; sleep 1; echo second"
    cluster.create(
        "pods",
        pod("follow", "node-1", [container("main", "sh", "-c", script)], restartPolicy="Never"),
    )
    cluster.wait_pod("follow", phase_is("Running"))
    with cluster.kubelet_get(
        1, "/containerLogs/ml/follow/main?follow=true", stream=True, timeout=30
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines == [b"first", b"second"]
    assert cluster.wait_pod("follow", phase_is("Succeeded"))


def test_a_failing_liveness_probe_kills_and_restarts_the_container(cluster: Emulated) -> None:
    probe = {"exec": {"command": ["cat", "/tmp/alive"]}, "periodSeconds": 1, "failureThreshold": 2}
    cluster.create(
        "pods",
        pod(
            "unlively",
            "node-2",
            [container("main", "sleep", "600", livenessProbe=probe)],
            terminationGracePeriodSeconds=1,
        ),
    )
    restarted = cluster.wait_pod("unlively", lambda p: main_status(p).get("restartCount") == 1)
    assert main_status(restarted)["lastState"]["terminated"]["exitCode"] == 137
    events = cluster.events("unlively")
    assert (
        "Unhealthy",
        "Liveness probe failed: cat: /tmp/alive: No such file or directory",
    ) in events
    assert ("Killing", "Container main failed liveness probe, will be restarted") in events


def test_readiness_waits_for_the_startup_probe(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod(
            "slow-start",
            "node-2",
            [
                container(
                    "main",
                    "sleep",
                    "600",
                    startupProbe={
                        "exec": {"command": ["test", "-f", "/tmp/up"]},
                        "periodSeconds": 1,
                        "failureThreshold": 30,
                    },
                    readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1},
                )
            ],
        ),
    )
    starting = cluster.wait_pod("slow-start", phase_is("Running"))
    deadline = time.time() + 10
    while not any(r == "Unhealthy" for r, _ in cluster.events("slow-start")):
        assert time.time() < deadline
        time.sleep(0.1)
    starting = cluster.wait_pod("slow-start", phase_is("Running"))
    assert (main_status(starting)["started"], condition(starting, "Ready")) == (False, "False")
    cluster.exec("slow-start", "main", ["touch", "/tmp/up"])
    ready = cluster.wait_pod("slow-start", is_ready)
    assert main_status(ready)["started"] is True


def test_an_image_the_nodes_do_not_have_fails_to_pull(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod("typo", "node-1", [{"name": "main", "image": "horovod/horovd:0.28.1"}]),
    )
    waiting = cluster.wait_pod(
        "typo",
        lambda p: (
            main_status(p).get("state", {}).get("waiting", {}).get("reason") == "ErrImagePull"
        ),
    )
    ref = "docker.io/horovod/horovd:0.28.1"
    message = (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to '
        f'resolve reference "{ref}": {ref}: not found'
    )
    assert main_status(waiting)["state"]["waiting"]["message"] == message
    assert waiting["status"]["phase"] == "Pending"
    events = cluster.events("typo")
    assert ("Failed", f'Failed to pull image "horovod/horovd:0.28.1": {message}') in events
    assert ("Failed", "Error: ErrImagePull") in events


def test_a_pod_has_its_own_network_hostname_and_a_read_only_sysfs(cluster: Emulated) -> None:
    cluster.create(
        "pods",
        pod(
            "own",
            "node-2",
            [container("main", "sleep", "60")],
            hostname="own-host",
            subdomain="sub",
        ),
    )
    running = cluster.wait_pod("own", phase_is("Running"))
    assert cluster.exec("own", "main", ["ls", "/sys/class/net"]) == (0, "eth0\nlo\n")
    assert cluster.exec("own", "main", ["hostname"]) == (0, "own-host\n")
    hosts = cluster.exec("own", "main", ["tail", "-n", "1", "/etc/hosts"])
    assert hosts == (
        0,
        f"{running['status']['podIP']}\town-host.sub.ml.svc.cluster.local\town-host\n",
    )
    code, text = cluster.exec("own", "main", ["touch", "/sys/x"])
    assert code == 1 and "Read-only file system" in text


def test_projected_and_downward_api_volumes(cluster: Emulated) -> None:
    cluster.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "root-ca"},
            "data": {"ca.crt": "CA\n"},
        },
    )
    projected = {
        "defaultMode": 0o420,
        "sources": [
            {"configMap": {"name": "root-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
                    ]
                }
            },
        ],
    }
    downward = {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}
    host_path = Path("/run/secrets/kubernetes.io/serviceaccount")  # /var/run -> /run
    existed = host_path.exists()
    cluster.create(
        "pods",
        pod(
            "projected",
            "node-1",
            [
                container(
                    "main",
                    "sleep",
                    "60",
                    volumeMounts=[
                        {
                            "name": "access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        },
                        {"name": "info", "mountPath": "/etc/podinfo"},
                    ],
                )
            ],
            labels={"b": "2", "a": "1"},
            volumes=[
                {"name": "access", "projected": projected},
                {"name": "info", "downwardAPI": downward},
            ],
        ),
    )
    cluster.wait_pod("projected", phase_is("Running"))
    base = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert cluster.exec("projected", "main", ["cat", f"{base}/ca.crt", f"{base}/namespace"]) == (
        0,
        "CA\nml",
    )
    assert cluster.exec("projected", "main", ["cat", "/etc/podinfo/labels"]) == (0, 'a="1"\nb="2"')
    assert host_path.exists() == existed  # the mount point was made in the container's /run


def test_a_token_the_api_server_does_not_issue_fails_the_mount(cluster: Emulated) -> None:
    """The ServiceAccount admission plugin lets the pod in; the account is deleted while the
    kubelet waits for the pod's first volume (a claim not created yet), so the token request
    that follows is refused."""
    accounts = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "short-lived"}}
    cluster.api.create(accounts, body)
    token = {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}
    cluster.create(
        "pods",
        pod(
            "tokenless",
            "node-1",
            [container("main", "sleep", "60")],
            serviceAccountName="short-lived",
            volumes=[
                {"name": "cache", "persistentVolumeClaim": {"claimName": "later"}},
                {"name": "kube-api-access", "projected": token},
            ],
        ),
    )
    cluster.api.delete(f"{accounts}/short-lived")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.create("persistentvolumeclaims", claim)
    message = (
        'MountVolume.SetUp failed for volume "kube-api-access" : failed to fetch token: '
        'serviceaccounts "short-lived" not found'
    )
    deadline = time.time() + 20
    while ("FailedMount", message) not in cluster.events("tokenless"):
        assert time.time() < deadline, cluster.events("tokenless")
        time.sleep(0.1)


def test_a_sub_path_that_leads_out_of_its_volume_is_refused(cluster: Emulated) -> None:
    mount = {"name": "data", "mountPath": "/data"}
    cluster.create(
        "pods",
        pod(
            "escape",
            "node-1",
            [container("main", "true", volumeMounts=[{**mount, "subPath": "out"}])],
            initContainers=[container("link", "ln", "-s", "/", "/data/out", volumeMounts=[mount])],
            volumes=[{"name": "data", "emptyDir": {}}],
        ),
    )
    waiting = cluster.wait_pod(
        "escape",
        lambda p: (
            main_status(p).get("state", {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
    )
    assert main_status(waiting)["state"]["waiting"]["message"] == (
        'failed to prepare subPath for volumeMount "data" of container "main"'
    )


def test_the_kubelet_lets_in_only_clients_a_subject_access_review_allows(
    cluster: Emulated,
) -> None:
    cluster.create(
        "pods",
        pod("guarded", "node-1", [container("main", "sh", "-c", "echo secret-ish; sleep 60")]),
    )
    cluster.wait_pod("guarded", phase_is("Running"))
    path = "/containerLogs/ml/guarded/main"
    stranger = cluster.kubelet_client("a-stranger", allowed=False)
    refused = cluster.kubelet_get(1, path, client=stranger)
    assert (refused.status_code, refused.text) == (
        403,
        "Forbidden (user=a-stranger, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    )
    anonymous = requests.Session()
    anonymous.trust_env = False
    assert cluster.side.control is not None
    anonymous.verify = str(cluster.side.control.ca)
    nobody = cluster.kubelet_get(1, path, client=anonymous)
    assert (nobody.status_code, nobody.text) == (401, "Unauthorized")
    # kube-apiserver's pods/log reaches the kubelet as its kubelet client, which may.
    deadline = time.time() + 10
    while (log := cluster.api.text("/api/v1/namespaces/ml/pods/guarded/log")) == "":
        assert time.time() < deadline
        time.sleep(0.1)
    assert log == "secret-ish\n"
    cluster.api.delete("/api/v1/namespaces/ml/pods/guarded", {"gracePeriodSeconds": 0})
    cluster.wait_gone("guarded")


def test_an_eviction_stops_the_pod_and_its_final_status_keeps_disruption_target(
    cluster: Emulated,
) -> None:
    polite = "trap 'echo got TERM; exit 0' TERM; while :; do sleep 0.1; done"
    cluster.create(
        "pods",
        pod(
            "evicted",
            "node-2",
            [container("main", "sh", "-c", polite)],
            terminationGracePeriodSeconds=5,
        ),
    )
    cluster.wait_pod("evicted", phase_is("Running"))
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "evicted", "namespace": NAMESPACE},
    }
    cluster.api.create(f"/api/v1/namespaces/{NAMESPACE}/pods/evicted/eviction", eviction)
    cluster.wait_gone("evicted")
    final = cluster.history("evicted")[-1]
    disruption = [
        (c["status"], c.get("reason"), c.get("message"))
        for c in final["status"]["conditions"]
        if c["type"] == "DisruptionTarget"
    ]
    assert disruption == [("True", "EvictionByEvictionAPI", "Eviction API: evicting")]
    assert final["status"]["phase"] == "Succeeded"
    assert main_status(final)["state"]["terminated"]["exitCode"] == 0
    assert ("Killing", "Stopping container main") in cluster.events("evicted")
    # The kubelet's conditions were written after the API server's, and merged with it.
    assert condition(final, "Ready") == "False"
    ready = next(c for c in final["status"]["conditions"] if c["type"] == "Ready")
    assert ready.get("reason") == "PodCompleted"


def test_a_pod_past_its_active_deadline_ends_failed_with_deadline_exceeded(
    cluster: Emulated,
) -> None:
    cluster.create(
        "pods",
        pod(
            "deadline",
            "node-1",
            [container("main", "sleep", "600")],
            activeDeadlineSeconds=2,
            terminationGracePeriodSeconds=1,
            restartPolicy="Never",
        ),
    )
    started = time.time()
    ended = cluster.wait_pod("deadline", phase_is("Failed"))
    assert 2 <= time.time() - started < 10
    status = ended["status"]
    assert (status["reason"], status["message"]) == (
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    )
    assert main_status(ended)["state"]["terminated"]["exitCode"] == 137  # sleep ignores TERM
    assert (
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    ) in cluster.events("deadline")
    # Ended, not deleted: the pod stays until someone deletes it.
    time.sleep(1)
    assert cluster.pod("deadline") is not None
    cluster.api.delete("/api/v1/namespaces/ml/pods/deadline", {"gracePeriodSeconds": 0})
    cluster.wait_gone("deadline")
