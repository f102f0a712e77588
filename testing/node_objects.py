"""The nodes a kubelet registers: v1/Node objects with what the scheduler and the API server's
log proxy read (allocatable, taints, labels, InternalIP, the kubelet's port, Ready)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from testing.kube_api import Api
from testing.waiting import wait_for

JSON = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"


@dataclass
class NodeSpec:
    name: str
    cpu: str = "32"
    memory: str = "128Gi"
    disk: str = "500Gi"  # ephemeral-storage, which every real kubelet reports
    gpus: int = 4
    pods: int = 110
    taints: list[JSON] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    zone: timedelta = timedelta(0)  # the node's local time zone (log timestamps)


def node_object(node: NodeSpec, port: int, address: str = "127.0.0.1") -> JSON:
    """The Node a kubelet for ``node`` registers, its endpoint at ``address``:``port``."""
    allocatable = {
        "cpu": node.cpu,
        "memory": node.memory,
        "ephemeral-storage": node.disk,
        "pods": str(node.pods),
        "nvidia.com/gpu": str(node.gpus),
    }
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", **node.labels}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"taints": node.taints} if node.taints else {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
        },
    }


def wait_schedulable(api: Api, names: Iterable[str], timeout: float) -> None:
    """Until the node lifecycle controller lifted the not-ready taint that admission
    (TaintNodesByCondition) puts on every new Node, from each of ``names``."""

    def tainted(name: str) -> bool:
        node = api.get(f"/api/v1/nodes/{name}") or {}
        taints = (node.get("spec") or {}).get("taints") or []
        return not node or any(t["key"] == NOT_READY for t in taints)

    nodes = sorted(names)
    wait_for(f"{nodes} without {NOT_READY}", lambda: not any(map(tainted, nodes)), timeout)
