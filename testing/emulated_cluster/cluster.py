"""Bring the emulated cluster up and down: the state tmpfs, the bridge, the cgroup, the real
control plane (``testing/control_plane``), the image layer, cluster DNS and one kubelet per node,
each a client of kube-apiserver with a user of its own (the kubelets ``system:node:<name>``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testing import node_objects as nodes
from testing.control_plane.run import ControlPlane
from testing.emulated_cluster import cleanup, image, marks, network, realcluster
from testing.emulated_cluster.api import Api, Scope
from testing.emulated_cluster.cgroups import Cgroup, run_root
from testing.emulated_cluster.coredns import CoreDns
from testing.emulated_cluster.dns import ClusterDns
from testing.emulated_cluster.imagestore import normalized
from testing.emulated_cluster.kubelet import Kubelet
from testing.emulated_cluster.logserver import Tls
from testing.emulated_cluster.node import DEFAULT_IMAGE, NodeContext
from testing.node_objects import NodeSpec
from testing.paths import cache_dir

JSON = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"


@dataclass
class NodeShape:
    """What a Node object says about an emulated node."""

    name: str
    cpu: str = "2"
    memory: str = "8Gi"
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[JSON] = field(default_factory=list)


def node_object(shape: NodeShape, address: str, port: int) -> JSON:
    """A v1 Node as a registered kubelet reports it (Ready, InternalIP, kubelet endpoint)."""
    spec = NodeSpec(
        shape.name,
        cpu=shape.cpu,
        memory=shape.memory,
        gpus=shape.gpus,
        taints=shape.taints,
        labels={"kubernetes.io/arch": "amd64", **shape.labels},
    )
    node = nodes.node_object(spec, port, address)
    node["status"]["nodeInfo"] = {
        "containerRuntimeVersion": "containerd://emulated",
        "kubeletVersion": "v1.35.0-emulated",
    }
    return node


class Busy(Exception):
    """Another emulated cluster runs on this machine."""


def _lock(wait: bool) -> int:
    """One emulated cluster per machine: a start removes whatever another run left, so a second
    one must not start while the first runs. The kernel drops the lock when its holder dies.
    A run unlinks the lock file when it stops, so a lock taken on a file no longer at the path
    (a waiter that got it after that unlink, while a newer run locked a new file) is no lock:
    take it again."""
    marks.LOCK.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(marks.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise Busy(
                f"another emulated cluster runs on this machine (lock {marks.LOCK}); stop it first"
            ) from None
        try:
            current = os.stat(marks.LOCK)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)


def default_venv() -> Path:
    return Path(sys.prefix)


class MachineSide:
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent; leaves nothing)."""

    def __init__(
        self,
        nodes: list[NodeShape],
        venv: Path | None = None,
        cluster_domain: str = marks.CLUSTER_DOMAIN,
        images: frozenset[str] = frozenset({DEFAULT_IMAGE}),
        real: bool = False,
    ) -> None:
        """``images``: the image names the nodes have (each runs the emulated image, but
        :data:`image.STOCK_PYTHON_IMAGE` runs its variant). ``real``: real nodes (kubelet
        v1.35.4 and containerd: :mod:`.realcluster`) instead of ours, with the images of
        ``archives`` besides the pause and busybox images."""
        self.scope = Scope(None)  # kubelets and DNS watch every namespace
        self.control: ControlPlane | None = None
        self.shapes = nodes
        self.venv = venv or default_venv()
        self.cluster_domain = cluster_domain
        self.images = images
        self.kubelets: list[Kubelet] = []
        self.real = real
        self.real_nodes: realcluster.RealNodes | None = None
        self.dns: ClusterDns | CoreDns | None = None
        self.cgroup: Cgroup | None = None
        self.node_ips = list(marks.NODE_ADDRESSES[: len(nodes)])
        self._lock: int | None = None
        # What stop() found left after its cleanup, taken while it still held the machine: once
        # it lets go, the next run waiting for the lock makes its own.
        self.left_behind: dict[str, list[str]] | None = None

    @property
    def api(self) -> Api:
        """An admin client of kube-apiserver (system:masters)."""
        assert self.control is not None, "start() first"
        return self.control.admin_api()

    @property
    def dns_address(self) -> str:
        return marks.GATEWAY

    def start(self, wait_for_lock: bool = True) -> MachineSide:
        """Waits for (or, without ``wait_for_lock``, refuses with :class:`Busy`) another run."""
        self._lock = _lock(wait_for_lock)
        cleanup.remove_everything()  # what a killed run left
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        marks.STATE_ROOT.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "mode=0700",
                "ci-runner-emulated",
                str(marks.STATE_ROOT),
            ],
            check=True,
        )
        network.bridge_up(self.node_ips)
        self.cgroup = Cgroup(run_root())
        self.control = ControlPlane(
            marks.STATE_ROOT / "control-plane", Cgroup(self.cgroup.path / "control-plane")
        ).start()
        system = Cgroup(self.cgroup.path / "system").create(None)
        if self.real:
            self._start_real(system)
            return
        layer = image.build(marks.STATE_ROOT / "image", self.venv)
        variants = {
            normalized(name): image.build_named(
                name, marks.STATE_ROOT / f"image-{i}", self.venv, cache_dir()
            )
            for i, name in enumerate(sorted(self.images))
            if name == image.STOCK_PYTHON_IMAGE
        }
        self.dns = ClusterDns(
            self.api,
            self.scope,
            marks.STATE_ROOT / "dns",
            marks.GATEWAY,
            self.cluster_domain,
            system,
        ).start()
        addresses = network.Addresses()
        resolv = Path("/etc/resolv.conf")
        control = self.control
        for shape, ip in zip(self.shapes, self.node_ips, strict=True):
            pair = control.client_certificate(f"system:node:{shape.name}", ("system:nodes",))
            serving = control.serving_certificate(f"kubelet-{shape.name}", ip, shape.name)
            ctx = NodeContext(
                api=Api(control.url, ca=control.ca, cert=(pair.cert, pair.key)),
                node=shape.name,
                node_ip=ip,
                state=marks.STATE_ROOT / "nodes" / shape.name,
                image=layer,
                addresses=addresses,
                cgroups=self.cgroup.path / shape.name,
                claims=marks.CLAIMS,
                cluster_dns=[marks.GATEWAY],
                cluster_domain=self.cluster_domain,
                resolv_conf=resolv.read_text() if resolv.exists() else None,
                images=self.images,
                variants=variants,
                attach_api=self.api,
            )
            node = node_object(shape, ip, marks.KUBELET_PORT)
            tls = Tls(serving.cert, serving.key, control.ca)
            self.kubelets.append(Kubelet(ctx, self.scope, node, tls).start())
        for shape in self.shapes:
            self._wait_schedulable(shape.name)

    def _start_real(self, system: Cgroup) -> None:
        """CoreDNS, then a real node per shape."""
        assert self.control is not None and self.cgroup is not None
        binary = self.control.bin_dir / "coredns"
        self.dns = CoreDns(
            self.control, binary, marks.STATE_ROOT / "dns", self.cluster_domain, system
        ).start()
        shapes = []
        for shape in self.shapes:
            if shape.gpus:
                raise ValueError(f"{shape.name}: a real node here has no GPUs (no device plugin)")
            shapes.append(
                realcluster.Shape(
                    shape.name,
                    cpu=shape.cpu,
                    memory=shape.memory,
                    labels=tuple(sorted(shape.labels.items())),
                    taints=tuple((t["key"], t.get("value", ""), t["effect"]) for t in shape.taints),
                )
            )
        self.real_nodes = realcluster.RealNodes(
            self.control,
            shapes,
            self.node_ips,
            marks.STATE_ROOT / "nodes",
            self.cgroup.path,
            realcluster.node_sources(cache_dir(), self.venv),
        ).start()
        for shape in self.shapes:
            self._wait_schedulable(shape.name)

    def _wait_schedulable(self, name: str, timeout: float = 60.0) -> None:
        """Until the node lifecycle controller lifted the not-ready taint that admission
        (TaintNodesByCondition) puts on every new Node."""
        deadline = time.monotonic() + timeout
        while True:
            node = self.api.get(f"/api/v1/nodes/{name}") or {}
            taints = (node.get("spec") or {}).get("taints") or []
            if node and not any(t["key"] == NOT_READY for t in taints):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {name} kept its {NOT_READY} taint for {timeout:.0f}s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._lock is None:
            return  # never started, or another run holds the machine: nothing here is ours
        for kubelet in self.kubelets:
            kubelet.shutdown()
        self.kubelets = []
        if self.real_nodes is not None:
            self.real_nodes.stop()
            self.real_nodes = None
        if self.dns is not None:
            self.dns.stop()
            self.dns = None
        if self.control is not None:
            self.control.stop()
            self.control = None
        cleanup.remove_everything()
        self.left_behind = cleanup.inventory()
        if self._lock is not None:
            marks.LOCK.unlink(missing_ok=True)
            os.close(self._lock)
            self._lock = None
