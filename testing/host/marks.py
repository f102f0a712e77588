"""The names that mark what the emulated cluster creates on this machine, so a later start finds
and removes what a killed run left behind. Nothing outside these names is ever touched."""

from __future__ import annotations

from pathlib import Path

from testing.paths import cache_dir

BRIDGE = "cirbr0"  # "ci-runner bridge"; no other program uses the cir prefix here
SUBNET = "10.98.76"  # a private /24 that only lives on BRIDGE
PREFIX_LEN = 24
GATEWAY = f"{SUBNET}.1"  # the bridge's own address: DNS and S3 listen here
NODE_ADDRESSES = tuple(f"{SUBNET}.{i}" for i in range(2, 10))  # node InternalIPs on the bridge
OPERATOR_ADDRESS = f"{SUBNET}.10"  # the MPI Operator's own network namespace
SERVICE_RANGE = f"{SUBNET}.224/27"  # kube-apiserver's ClusterIPs: on the bridge, never dialled
KUBERNETES_SERVICE_IP = f"{SUBNET}.225"  # the first of SERVICE_RANGE: Service "kubernetes"
API_PORT = 6443  # kube-apiserver on GATEWAY
NETNS_PREFIX = "cire-"  # ip netns names: cire-mpi-operator (the pods' are containerd's)
VETH_PREFIX = "cirv"  # host side of a veth of ours: cirvmpiop
STATE_ROOT = Path("/run/ci-runner-emulated")  # one tmpfs: the control plane's and nodes' state
CLAIMS = STATE_ROOT / "claims"  # <namespace>/<claim>: every PersistentVolumeClaim's files
LOCK = Path("/run/ci-runner-emulated.lock")  # held by the run in progress (flock)
CGROUP_NAME = "ci-runner-emulated"  # a cgroup of this name holds every process we start
KUBELET_PORT = 10250
DNS_PORT = 53
S3_PORT = 9000
CLUSTER_DOMAIN = "cluster.local"


# The nodes (kubelet + containerd): what they leave on the machine is named here too.
CNI_NETWORK = "ci-runner-emulated"  # the CNI network's name: its iptables rules carry it
SYSCTL_RECORD = Path("/run/ci-runner-emulated.sysctls")  # the values before the first kubelet
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"  # kubeadm's PauseVersion in kubernetes v1.35.4
# Each real node's pods take addresses from its own block of the bridge's /24 (its pod CIDR).
POD_BLOCK = 32


def pod_cidr(node_index: int) -> str:
    """The pod CIDR of real node ``node_index`` (0-based): a /27 of the bridge's subnet,
    .32-.63 for the first; six nodes fit between the node addresses and the Service range."""
    if not 0 <= node_index < 6:
        raise ValueError(f"a real node's index is 0-5, not {node_index}")
    return f"{SUBNET}.{POD_BLOCK * (node_index + 1)}/27"


def node_roots() -> Path:
    """The real nodes' containerd roots: the seed (kept) and each run's copies (not kept), on
    the cache's file system (testing/emulated_cluster/seedroot.py)."""
    return cache_dir() / "node-roots"


def run_node_roots() -> Path:
    """This run's node roots, ``<node>`` each (the run's cleanup removes them)."""
    return node_roots() / "run"


def seed_building() -> Path:
    """A seed being made (a killed run's is removed by the next run's cleanup)."""
    return node_roots() / "building"
