"""Real nodes on the emulated cluster's control plane and bridge: one :class:`RealNode` per
shape, the images every node has (the pause image, :data:`imagestore.BUSYBOX_IMAGE` and the
images of :mod:`.nodeimages`, in one seed root: :mod:`.seedroot`), and the machine's sysctls
recorded before the first kubelet changes them (the run's cleanup puts them back)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testing.control_plane import binaries
from testing.control_plane.run import ControlPlane
from testing.emulated_cluster import (
    containerd,
    hostfiles,
    hoststate,
    imagestore,
    nodeimages,
    seedroot,
)
from testing.emulated_cluster.imagestore import Source
from testing.emulated_cluster.realnode import NodeSettings, RealNode
from testing.host import cgroups, marks
from testing.host.cgroups import Cgroup


class NotInstalled(Exception):
    """A program the real nodes need is missing; the message names the fix."""


@dataclass(frozen=True)
class Shape:
    """What one real node reports (its capacity is the machine's; allocatable is this)."""

    name: str
    cpu: str = "2"
    memory: str = "8Gi"
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()  # key, value, effect


def node_sources(cache: Path, venv: Path) -> list[Source]:
    """The archives in every node's root: the pause image, busybox, then :mod:`.nodeimages`'
    (the Horovod image's Python packages from the virtualenv at ``venv``)."""
    archives = [imagestore.pause_archive(cache), imagestore.busybox_archive(cache)]
    imagestore.prune(archives)
    return [*(imagestore.cached(a) for a in archives), nodeimages.source(cache, venv)]


class RealNodes:
    """Start with :meth:`start` (after the control plane), stop with :meth:`stop`."""

    def __init__(
        self,
        control: ControlPlane,
        shapes: Sequence[Shape],
        addresses: Sequence[str],
        state: Path,
        run_cgroup: Path,
        sources: Sequence[Source],
    ) -> None:
        """``run_cgroup``: the run's cgroup in the memory hierarchy; each node's containerd and
        kubelet go below it, and so does the kubelet's ``cgroupRoot`` in every hierarchy."""
        missing = containerd.missing_programs()
        if missing:
            raise NotInstalled(f"missing {', '.join(missing)}; fix: make real-node")
        if len(shapes) > 6:
            raise ValueError(f"at most 6 real nodes fit the bridge's pod CIDRs, not {len(shapes)}")
        self.control = control
        self.sources = sources
        self.state = state
        self.run_cgroup = run_cgroup
        self.kubelet = binaries.bin_dir() / "kubelet"
        memory_root, _ = cgroups.hierarchy()
        relative = "/" + str(run_cgroup.relative_to(memory_root))
        self.nodes = [
            RealNode(
                NodeSettings(
                    name=shape.name,
                    ip=ip,
                    pod_cidr=marks.pod_cidr(i),
                    cpu=shape.cpu,
                    memory=shape.memory,
                    labels=dict(shape.labels),
                    taints=[{"key": k, "value": v, "effect": e} for k, v, e in shape.taints],
                ),
                control,
                self.kubelet,
                state / shape.name,
                run_cgroup / f"{shape.name}-system",
                f"{relative}/{shape.name}",
            )
            for i, (shape, ip) in enumerate(zip(shapes, addresses, strict=True))
        ]

    def start(self) -> RealNodes:
        """The seed (made once), every containerd on a copy of it, then the kubelets one by one
        (each until it has bound the socket they share), then until every Node is Ready (the
        kubelets register while the others start)."""
        seed = seedroot.seed(self.sources, self.state / "seed", Cgroup(self.run_cgroup / "seed"))
        hoststate.record()
        for node in self.nodes:
            node.start_runtime(seed)
        for node in self.nodes:
            before = hostfiles.socket_inode()
            node.start_kubelet().wait_bound(before)
        for node in self.nodes:
            node.wait_ready()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
