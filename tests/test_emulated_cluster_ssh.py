"""The emulated cluster (real nodes) fails where a real one fails: an upstream-shaped MPIJob
worker (no command, so the operator's ``sshd -De`` with Debian's default sshd config, StrictModes
yes) refuses the operator's key mounted from the Secret volume (slow: real sshd and ssh in pods).

The objects are shaped as MPI Operator v0.8.2 creates them (kubeflow/mpi-operator
``pkg/controller/mpi_job_controller.go`` at v0.8.2): the ``J-ssh`` Secret of type
kubernetes.io/ssh-auth with an ECDSA P-521 key in ``EC PRIVATE KEY`` PEM (lines 1440-1476), the
``ssh-auth`` volume with defaultMode 0600 and items id_rsa, id_rsa.pub, authorized_keys mounted at
``/root/.ssh`` (lines 142-155, 1793-1816), the worker command ``/usr/sbin/sshd -De`` when the
template has none (lines 1529-1531), the worker's search domain ``J.NS.svc.cluster.local``
(lines 1520-1525), the launcher's OpenMPI env (lines 181-194: keep FQDN host names, the hostfile,
``-o ConnectionAttempts=10``)."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.emulated_cluster.harness import (
    NAMESPACE,
    Emulated,
    container,
    emulated,
    is_ready,
    phase_is,
    pod,
)

pytestmark = pytest.mark.slow
JOB = "train"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulated]:
    key = tmp_path_factory.mktemp("ssh") / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-f", str(key)],
        check=True,
    )
    with emulated(nodes=2) as running:
        running.create("secrets", ssh_secret(key))
        running.create(
            "services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": JOB},
                "spec": {
                    "clusterIP": "None",
                    "selector": {
                        "training.kubeflow.org/job-name": JOB,
                        "training.kubeflow.org/job-role": "worker",
                    },
                },
            },
        )
        yield running


def ssh_secret(key: Path) -> dict[str, Any]:
    private = key.read_bytes()
    assert private.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    public = key.with_suffix(".pub").read_bytes()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{JOB}-ssh"},
        "type": "kubernetes.io/ssh-auth",
        "data": {
            "ssh-privatekey": base64.b64encode(private).decode(),
            "ssh-publickey": base64.b64encode(public).decode(),
        },
    }


SSH_VOLUME = {
    "name": "ssh-auth",
    "secret": {
        "secretName": f"{JOB}-ssh",
        "defaultMode": 0o600,
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    },
}
SSH_MOUNT = {"name": "ssh-auth", "mountPath": "/root/.ssh"}


def worker(cluster: Emulated, index: int, command: list[str]) -> str:
    name = f"{JOB}-worker-{index}"
    cluster.create(
        "pods",
        pod(
            name,
            f"node-{index % 2 + 1}",
            [container("worker", *command, volumeMounts=[SSH_MOUNT])],
            hostname=name,
            subdomain=JOB,
            labels={
                "training.kubeflow.org/job-name": JOB,
                "training.kubeflow.org/job-role": "worker",
                "training.kubeflow.org/replica-index": str(index),
            },
            volumes=[SSH_VOLUME],
            dnsConfig={"searches": [f"{JOB}.{NAMESPACE}.svc.cluster.local"]},
        ),
    )
    cluster.wait_pod(name, is_ready)
    return f"{name}.{JOB}.{NAMESPACE}.svc"  # the hostfile's name


def launcher(cluster: Emulated, name: str, argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """A launcher-shaped pod on node-2 (the operator's OpenMPI env); (exit code, its log)."""
    env = [  # mpi_job_controller.go:181-194 ompiEnvVars
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
    ]
    cluster.create(
        "pods",
        pod(
            name,
            "node-2",
            [container("launcher", *argv, env=env, volumeMounts=[SSH_MOUNT])],
            volumes=[SSH_VOLUME],
            restartPolicy="Never",
        ),
    )
    done = cluster.wait_pod(name, phase_is("Succeeded", "Failed"), timeout)
    code = done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    return code, logs(cluster, name, "launcher", node=2)


def logs(cluster: Emulated, name: str, container_name: str, node: int) -> str:
    return cluster.kubelet_get(node, f"/containerLogs/{NAMESPACE}/{name}/{container_name}").text


def ssh(host: str) -> list[str]:
    return ["ssh", "-o", "ConnectionAttempts=10", "-o", "BatchMode=yes", host, "echo", "reached"]


def test_the_stock_sshd_refuses_the_operators_key_on_the_secret_volume(cluster: Emulated) -> None:
    host = worker(cluster, 0, ["/usr/sbin/sshd", "-De"])
    code, log = launcher(cluster, "launcher-stock", ssh(host))
    assert code == 255
    assert f"root@{host}: Permission denied (publickey,password)." in log
    assert "Authentication refused: bad ownership or modes for directory /root/.ssh" in logs(
        cluster, f"{JOB}-worker-0", "worker", node=1
    )


def test_the_same_pods_connect_once_sshd_stops_checking_modes(cluster: Emulated) -> None:
    host = worker(cluster, 1, ["/usr/sbin/sshd", "-De", "-o", "StrictModes=no"])
    code, log = launcher(cluster, "launcher-relaxed", ssh(host))
    assert (code, log.splitlines()[-1]) == (0, "reached")


RANKS = """
import horovod.torch as hvd, torch
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
print(f"rank {hvd.rank()} of {hvd.size()} mpi {hvd.mpi_enabled()} sum {total:g}")
"""


def test_horovodrun_takes_the_mpi_path_over_ssh_between_pods(cluster: Emulated) -> None:
    relaxed = ["/usr/sbin/sshd", "-De", "-o", "StrictModes=no"]
    hosts = [worker(cluster, index, relaxed) for index in (2, 3)]
    argv = [
        "horovodrun",
        "-np",
        "2",
        "-H",
        ",".join(f"{h}:1" for h in hosts),
        "python",
        "-c",
        RANKS,
    ]
    # Three Pythons importing torch on two shared cores: allow for a busy machine.
    code, log = launcher(cluster, "launcher-horovod", argv, timeout=180)
    ranks = sorted(line for line in log.splitlines() if "<stdout>:rank" in line)
    assert (code, ranks) == (
        0,
        ["[1,0]<stdout>:rank 0 of 2 mpi True sum 3", "[1,1]<stdout>:rank 1 of 2 mpi True sum 3"],
    ), log
