"""The names that mark what the emulated cluster creates on this machine, so a later start finds
and removes what a killed run left behind. Nothing outside these names is ever touched."""

from __future__ import annotations

from pathlib import Path

BRIDGE = "cirbr0"  # "ci-runner bridge"; no other program uses the cir prefix here
SUBNET = "10.98.76"  # a private /24 that only lives on BRIDGE
PREFIX_LEN = 24
GATEWAY = f"{SUBNET}.1"  # the bridge's own address: DNS and S3 listen here
NODE_ADDRESSES = tuple(f"{SUBNET}.{i}" for i in range(2, 10))  # node InternalIPs on the bridge
OPERATOR_ADDRESS = f"{SUBNET}.10"  # the MPI Operator's own network namespace
POD_ADDRESSES = tuple(f"{SUBNET}.{i}" for i in range(16, 224))
SERVICE_RANGE = f"{SUBNET}.224/27"  # kube-apiserver's ClusterIPs: on the bridge, never dialled
KUBERNETES_SERVICE_IP = f"{SUBNET}.225"  # the first of SERVICE_RANGE: Service "kubernetes"
API_PORT = 6443  # kube-apiserver on GATEWAY
NETNS_PREFIX = "cire-"  # ip netns names: cire-<8 hex of the pod uid>, cire-mpi-operator
VETH_PREFIX = "cirv"  # host side of each pod's veth: cirv<8 hex>
STATE_ROOT = Path("/run/ci-runner-emulated")  # one tmpfs: pod dirs, logs, volumes, overlays
LOCK = Path("/run/ci-runner-emulated.lock")  # held by the run in progress (flock)
CGROUP_NAME = "ci-runner-emulated"  # a cgroup of this name holds every process we start
KUBELET_PORT = 10250
DNS_PORT = 53
S3_PORT = 9000
CLUSTER_DOMAIN = "cluster.local"


def short_id(uid: str) -> str:
    """8 hex characters of a pod uid: short enough for interface names (15 bytes max)."""
    return "".join(ch for ch in uid if ch.isalnum())[:8].lower().rjust(8, "0")


def netns_name(uid: str) -> str:
    return NETNS_PREFIX + short_id(uid)


def veth_name(uid: str) -> str:
    return VETH_PREFIX + short_id(uid)
