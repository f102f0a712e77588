"""Bring the emulated cluster up and down: the state tmpfs, the bridge, the cgroup, the real
control plane (``testing/control_plane``, Kueue v0.17.0 in it by default), CoreDNS and one real
node per shape (kubelet v1.35.4, containerd, runc and CNI: :mod:`.realcluster`), each kubelet a
client of kube-apiserver as ``system:node:<name>``."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testing.control_plane.kueue import Mode
from testing.control_plane.run import ControlPlane
from testing.emulated_cluster import cleanup, realcluster
from testing.emulated_cluster.coredns import CoreDns
from testing.host import marks, network
from testing.host.cgroups import Cgroup, run_root
from testing.kube_api import Api
from testing.node_objects import wait_schedulable
from testing.paths import cache_dir

JSON = dict[str, Any]


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
        nodes: list[realcluster.Shape],
        venv: Path | None = None,
        cluster_domain: str = marks.CLUSTER_DOMAIN,
        kueue: Mode = Mode.RUNNING,
    ) -> None:
        """``venv``: the virtualenv whose torch and Horovod the Horovod image holds
        (:mod:`.sitelayer`), this Python's by default; ``kueue``: Kueue v0.17.0 runs, with its
        webhooks on loopback, unless told otherwise."""
        self.control: ControlPlane | None = None
        self.shapes = nodes
        self.venv = venv or default_venv()
        self.cluster_domain = cluster_domain
        self.kueue = kueue
        self.real_nodes: realcluster.RealNodes | None = None
        self.dns: CoreDns | None = None
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
            marks.STATE_ROOT / "control-plane",
            Cgroup(self.cgroup.path / "control-plane"),
            kueue_mode=self.kueue,
        ).start()
        system = Cgroup(self.cgroup.path / "system").create()
        binary = self.control.bin_dir / "coredns"
        self.dns = CoreDns(
            self.control, binary, marks.STATE_ROOT / "dns", self.cluster_domain, system
        ).start()
        self.real_nodes = realcluster.RealNodes(
            self.control,
            self.shapes,
            self.node_ips,
            marks.STATE_ROOT / "nodes",
            self.cgroup.path,
            realcluster.node_sources(cache_dir(), self.venv),
        ).start()
        wait_schedulable(self.api, [shape.name for shape in self.shapes], 60.0)

    def stop(self) -> None:
        if self._lock is None:
            return  # never started, or another run holds the machine: nothing here is ours
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
