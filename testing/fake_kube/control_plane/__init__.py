"""The control plane around the fake API server, each part a client of its API, as in a cluster.

:class:`ControlPlane` starts the garbage collector, the scheduler, the Job and TTL controllers,
MPI Operator v0.8.2's MPIJob controller and (unless a real-process kubelet plays the nodes) the
scripted kubelet of ``nodes``. They react to every change the API makes; time-based rules run
when a test moves control-plane time with :meth:`FakeKubeServer.advance`.
"""

from __future__ import annotations

from testing.fake_kube.control_plane.garbage_collector import GarbageCollector
from testing.fake_kube.control_plane.job_controller import JobController, TtlController
from testing.fake_kube.control_plane.kubelet import ScriptedKubelet
from testing.fake_kube.control_plane.mpi_operator import MpiJobController
from testing.fake_kube.control_plane.scheduler import Scheduler
from testing.fake_kube.server import FakeKubeServer
from testing.node_objects import NodeSpec

__all__ = ["ControlPlane", "NodeSpec", "default_nodes"]


def default_nodes() -> list[NodeSpec]:
    """Three GPU nodes with room for the tests' jobs."""
    return [NodeSpec(f"node-{i}") for i in range(1, 4)]


class ControlPlane:
    def __init__(
        self,
        server: FakeKubeServer,
        nodes: list[NodeSpec] | None = None,
        scripted_kubelet: bool = True,
        cluster_domain: str = "",
    ) -> None:
        self.server = server
        with server.store.batch():
            self.garbage_collector = GarbageCollector(server)
            self.scheduler = Scheduler(server)
            self.jobs = JobController(server)
            self.ttl = TtlController(server)
            self.mpi_operator = MpiJobController(server, cluster_domain)
            self.kubelet = (
                ScriptedKubelet(server, default_nodes() if nodes is None else nodes)
                if scripted_kubelet
                else None
            )

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
