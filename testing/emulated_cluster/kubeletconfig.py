"""The KubeletConfiguration of one real node (kubelet.config.k8s.io/v1beta1, kubernetes v1.35.4),
in the pattern of kind's node config, for a host without systemd on cgroup v1: ``failCgroupV1``
off (the kubelet refuses v1 otherwise: pkg/kubelet/apis/config/validation/validation_linux.go),
the cgroupfs driver under a cgroup root of the run's, webhook authentication and authorization
on its HTTPS port, no eviction and no image garbage collection (the tests fill neither), and
the node's capacity shaped with ``systemReserved`` (each kubelet sees the whole machine)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testing.host import marks

JSON = dict[str, Any]
MEMINFO = Path("/proc/meminfo")
UNITS = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


@dataclass(frozen=True)
class NodeFiles:
    """What one kubelet is given: its serving pair, the CA that signs its clients."""

    client_ca: Path
    tls_cert: Path
    tls_key: Path
    pod_logs: Path


def quantity_bytes(text: str) -> int:
    """A memory quantity ("8Gi", "512Mi", "1000000") in bytes."""
    for suffix, factor in UNITS.items():
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * factor
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a memory quantity this module reads: {text!r}")


def quantity_millicores(text: str) -> int:
    """A CPU quantity ("2", "500m") in millicores."""
    if text.endswith("m") and text[:-1].isdigit():
        return int(text[:-1])
    if text.isdigit():
        return int(text) * 1000
    raise ValueError(f"not a CPU quantity this module reads: {text!r}")


def machine() -> tuple[int, int]:
    """(millicores, bytes of memory) this machine has, as the kubelet's cAdvisor counts them."""
    for line in MEMINFO.read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) * 1024
            break
    else:
        raise RuntimeError(f"no MemTotal in {MEMINFO}")
    return (os.cpu_count() or 1) * 1000, memory


def system_reserved(cpu: str, memory: str, have: tuple[int, int]) -> dict[str, str]:
    """What to hold back of ``have`` so that the node's allocatable is ``cpu`` and ``memory``
    (never more than the machine: a shape above it gets the whole machine)."""
    millicores, memory_bytes = have
    reserved = {
        "cpu": f"{max(0, millicores - quantity_millicores(cpu))}m",
        "memory": str(max(0, memory_bytes - quantity_bytes(memory))),
    }
    return {k: v for k, v in reserved.items() if v not in ("0m", "0")}


def config(
    node_ip: str,
    runtime_endpoint: str,
    cgroup_root: str,
    files: NodeFiles,
    reserved: dict[str, str],
    cluster_domain: str = marks.CLUSTER_DOMAIN,
) -> JSON:
    """The KubeletConfiguration for the node at ``node_ip``."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "containerRuntimeEndpoint": runtime_endpoint,
        "address": node_ip,
        "port": marks.KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzPort": 0,  # every node would bind 127.0.0.1:10248 otherwise
        "tlsCertFile": str(files.tls_cert),
        "tlsPrivateKeyFile": str(files.tls_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(files.client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [marks.GATEWAY],
        "clusterDomain": cluster_domain,
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(files.pod_logs),
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {
            "memory.available": "0%",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "systemReserved": reserved,
        "enforceNodeAllocatable": ["pods"],
        "nodeStatusUpdateFrequency": "2s",
        "nodeLeaseDurationSeconds": 8,  # renewed every 2 s: the control plane's grace is 16 s
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "5s",
        "serializeImagePulls": False,
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE: the default -999 is refused
        "localStorageCapacityIsolation": True,
        "shutdownGracePeriod": "0s",
    }
