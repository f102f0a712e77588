"""For tests: the emulated nodes against the fake API server, with helpers to create pods,
wait for their status through the API and run commands in their containers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from testing.emulated_cluster.api import Api, Scope
from testing.emulated_cluster.cluster import MachineSide, NodeShape
from testing.fake_kube.control_plane import ControlPlane
from testing.fake_kube.server import FakeKubeServer

JSON = dict[str, Any]
NAMESPACE = "ml"
IMAGE = "horovod/horovod:0.28.1"
WAIT = 30.0  # real seconds before a test gives up (never reached when green)


@dataclass
class Emulated:
    server: FakeKubeServer
    api: Api
    side: MachineSide

    def create(self, plural: str, obj: JSON) -> JSON:
        obj.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
        created = self.api.create(f"/api/v1/namespaces/{NAMESPACE}/{plural}", obj)
        assert created is not None
        return created

    def pod(self, name: str) -> JSON | None:
        return self.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")

    def wait_pod(self, name: str, check: Callable[[JSON], bool], timeout: float = WAIT) -> JSON:
        deadline = time.time() + timeout
        while True:
            pod = self.pod(name)
            if pod is not None and check(pod):
                return pod
            if time.time() > deadline:
                raise AssertionError(f"pod {name} never got there; last seen: {pod}")
            time.sleep(0.1)

    def wait_gone(self, name: str, timeout: float = WAIT) -> None:
        deadline = time.time() + timeout
        while self.pod(name) is not None:
            if time.time() > deadline:
                raise AssertionError(f"pod {name} was never deleted")
            time.sleep(0.1)

    def exec(
        self, name: str, container: str, argv: list[str], timeout: float = 20
    ) -> tuple[int, str]:
        """Like ``kubectl exec``: the command in the running container."""
        for kubelet in self.side.kubelets:
            worker = kubelet.find(NAMESPACE, name)
            if worker is None:
                continue
            slot = next(s for s in worker.containers() if s.name == container)
            assert slot.process is not None, f"{name}/{container} is not running"
            return slot.process.exec(argv, timeout)
        raise AssertionError(f"pod {name} runs on no node")

    def events(self, name: str) -> list[tuple[str, str]]:
        items, _ = self.api.list(f"/api/v1/namespaces/{NAMESPACE}/events")
        return [(e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == name]


def pod(name: str, node: str, containers: list[JSON], **spec: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": spec.pop("labels", {})},
        "spec": {"nodeName": node, "containers": containers, **spec},
    }


def container(name: str, *command: str, **fields: Any) -> JSON:
    return {"name": name, "image": IMAGE, "command": list(command), **fields}


def condition(pod: JSON, kind: str) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def main_status(pod: JSON) -> JSON:
    """The first container's status, {} before the kubelet wrote one."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def is_ready(pod: JSON) -> bool:
    return condition(pod, "Ready") == "True"


def phase_is(*phases: str) -> Callable[[JSON], bool]:
    return lambda pod: (pod.get("status") or {}).get("phase") in phases


@contextmanager
def emulated(nodes: int = 2, control_plane: bool = False) -> Iterator[Emulated]:
    """The emulated nodes against a fake API server; with ``control_plane``, also the control
    plane of ``testing/fake_kube/control_plane/`` without its scripted kubelet (MPI Operator, Job
    controller, scheduler, garbage collector) and the Node objects the scheduler binds to."""
    with FakeKubeServer() as server:
        api = Api(server.url, server.token)
        shapes = [NodeShape(f"node-{i + 1}") for i in range(nodes)]
        control = ControlPlane(server, scripted_kubelet=False) if control_plane else None
        side = MachineSide(api, Scope(NAMESPACE), shapes).start()
        try:
            if control_plane:
                for node in side.node_objects():
                    api.create("/api/v1/nodes", node)
            yield Emulated(server, api, side)
        finally:
            side.stop()
            if control is not None:
                control.stop()
