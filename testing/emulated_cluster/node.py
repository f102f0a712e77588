"""What the pod workers of a node share (:class:`NodeContext`) and a container slot of a pod
across its restarts (:class:`Slot`), with the image names the node has."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testing.emulated_cluster import network
from testing.emulated_cluster.api import Api
from testing.emulated_cluster.container import ContainerProcess
from testing.emulated_cluster.image import Image
from testing.emulated_cluster.imagestore import normalized
from testing.emulated_cluster.probes import ProbeState

JSON = dict[str, Any]
DEFAULT_IMAGE = "horovod/horovod:0.28.1"


@dataclass
class NodeContext:
    """What the pod workers of one node share."""

    api: Api
    node: str
    node_ip: str
    state: Path
    image: Image
    addresses: network.Addresses
    cgroups: Path
    claims: Path
    cluster_dns: list[str]
    cluster_domain: str
    resolv_conf: str | None
    images: frozenset[str] = frozenset({DEFAULT_IMAGE})  # what "pulls"
    # The normalized names whose layer is not ``image`` (image.STOCK_PYTHON_IMAGE's).
    variants: Mapping[str, Image] = field(default_factory=dict)
    # The attach/detach controller's view (kube-controller-manager's, cluster-wide): a node's
    # own user may list only the pods bound to it.
    attach_api: Api | None = None


def image_for(ctx: NodeContext, name: str) -> Image:
    """The layer a container of image ``name`` runs."""
    return ctx.variants.get(normalized(name), ctx.image)


def rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Slot:
    """A container of the pod across its restarts."""

    spec: JSON
    init: bool
    restart_count: int = 0
    process: ContainerProcess | None = None
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    container_id: str = ""
    next_start: float = 0.0
    backoff: float = 0.0
    pull_backoff: float = 0.0
    done: bool = False  # terminated and not to be restarted
    readiness: ProbeState | None = None
    liveness: ProbeState | None = None
    startup: ProbeState | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def field_path(self) -> str:
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"

    def running(self) -> bool:
        return "running" in self.state

    def ready(self) -> bool:
        ready = self.readiness is None or self.readiness.result
        return self.started() and ready

    def started(self) -> bool:
        """Running and past its startup probe (prober: readiness and liveness wait for it)."""
        return self.running() and (self.startup is None or self.startup.result)

    def succeeded(self) -> bool:
        return bool(self.state.get("terminated", {}).get("exitCode") == 0)
