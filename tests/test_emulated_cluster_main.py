"""``python -m testing.emulated_cluster``: prints its DNS (and S3) and ``ready``, leaves nothing
behind on SIGTERM, and a start after SIGKILL removes what the killed run left (slow)."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from testing.control_plane.run import OPERATOR_NETNS, OPERATOR_VETH
from testing.emulated_cluster import cleanup, hoststate
from testing.emulated_cluster.harness import busybox
from testing.host import marks
from testing.paths import REPO_ROOT

pytestmark = pytest.mark.slow
NOTHING: dict[str, list[str]] = {
    "processes": [],
    "netns": [],
    "links": [],
    "mounts": [],
    "cgroups": [],
    "iptables": [],
    "files": [],
    "sysctls": [],
    "state": [],
}


def start(kubeconfig: Path, *flags: str) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "testing.emulated_cluster", "--kubeconfig", str(kubeconfig), *flags],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    while not lines or lines[-1] != "ready":
        line = process.stdout.readline()
        assert line, f"the emulated cluster ended before ready: {lines}"
        lines.append(line.rstrip("\n"))
    return process, lines


def api(kubeconfig: Path) -> tuple[str, requests.Session]:
    """The server and a session with the kubeconfig's token, trusting only its CA."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = kubeconfig.with_suffix(".ca.crt")
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    session = requests.Session()
    session.trust_env = False
    session.verify = str(ca)
    session.headers["Authorization"] = f"Bearer {config['users'][0]['user']['token']}"
    return cluster["server"], session


def run_pod(kubeconfig: Path) -> dict[str, Any]:
    url, session = api(kubeconfig)
    pods = f"{url}/api/v1/namespaces/default/pods"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper"},
        "spec": {
            "nodeName": "emulated-node-1",
            "containers": [busybox("main", "sleep", "600")],
        },
    }
    session.post(pods, json=body, timeout=10).raise_for_status()
    deadline = time.time() + 60
    while time.time() < deadline:
        pod: dict[str, Any] = session.get(f"{pods}/sleeper", timeout=10).json()
        if (pod.get("status") or {}).get("phase") == "Running":
            return pod
        time.sleep(0.1)
    raise AssertionError("the pod never ran")


def test_a_run_prints_dns_s3_ready_and_sigterm_leaves_nothing(tmp_path: Path) -> None:
    before = hoststate.read()
    assert cleanup.inventory() == NOTHING
    process, lines = start(tmp_path / "kubeconfig", "--s3")
    try:
        assert lines == [
            f"dns {marks.GATEWAY}",
            f"s3 http://{marks.GATEWAY}:{marks.S3_PORT}",
            "ready",
        ]
        assert requests.get(f"http://{marks.GATEWAY}:{marks.S3_PORT}/", timeout=10).ok
        run_pod(tmp_path / "kubeconfig")
        during = cleanup.inventory()
        # A pod's network namespace is containerd's, under the run's state directory.
        assert (during["netns"], during["links"]) == (
            [OPERATOR_NETNS],
            [marks.BRIDGE, OPERATOR_VETH],
        )
        assert during["processes"] and during["mounts"] and during["sysctls"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert cleanup.inventory() == NOTHING
    assert hoststate.read() == before


def test_a_start_after_sigkill_removes_what_the_killed_run_left(tmp_path: Path) -> None:
    """Kubelets, containerd, shims and pods, their mounts and cgroups, the CNI masquerade rule
    and the kubelet's chains, the sysctls the kubelet changed."""
    before = hoststate.read()
    assert cleanup.inventory() == NOTHING
    killed, _ = start(tmp_path / "first")
    run_pod(tmp_path / "first")
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    left = cleanup.inventory()
    assert left["processes"] and left["mounts"] and left["cgroups"]
    assert left["sysctls"] == [str(marks.SYSCTL_RECORD)]
    assert [r for r in left["iptables"] if r.startswith("-A POSTROUTING -s 10.98.76.33/32")]
    assert "iptables filter KUBE-FIREWALL" in left["iptables"]
    assert hoststate.read()["vm.overcommit_memory"] == "1"

    again, lines = start(tmp_path / "second")
    try:
        assert lines == [f"dns {marks.GATEWAY}", "ready"]
        assert not set(left["processes"]) & set(cleanup.inventory()["processes"])
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(60) == 0
    assert cleanup.inventory() == NOTHING
    assert hoststate.read() == before
