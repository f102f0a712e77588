"""For tests: the emulated cluster (the real control plane and real nodes), with helpers to
create pods, wait for their status through the API and ask a node's kubelet."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from testing.control_plane import accounts, rbac
from testing.emulated_cluster import imagestore, nodeimages, realcluster
from testing.emulated_cluster.cluster import MachineSide
from testing.host import marks
from testing.kube_api import Api, Informer
from testing.waiting import WAIT, wait_for

JSON = dict[str, Any]
NAMESPACE = "ml"
IMAGE = nodeimages.HOROVOD_IMAGE
# An image of a registry that refuses at once: port 1 of loopback (a name to resolve may hang).
ABSENT = "127.0.0.1:1/ci-runner/absent:1"


@dataclass
class Emulated:
    api: Api  # system:masters
    side: MachineSide
    seen: list[tuple[str, JSON]] = field(default_factory=list)  # every pod event, in order
    _kubelet_client: requests.Session | None = None
    recorder: Informer | None = None  # the watch that fills ``seen``

    def seen_event(self, kind: str, obj: JSON) -> None:
        self.seen.append((kind, obj))

    def stop(self) -> None:
        """Stop the cluster before the end of the ``with`` block (a test of what stop leaves)."""
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None
        self.side.stop()

    def kubelet_client(self, user: str, allowed: bool) -> requests.Session:
        """A session with a client certificate of the cluster's CA for ``user``, given the
        rights of kube-apiserver's kubelet client when ``allowed``."""
        control = self.side.control
        assert control is not None
        if allowed:
            rbac.grant_kubelet_client(self.api, user)
        pair = control.client_certificate(user)
        session = requests.Session()
        session.trust_env = False
        session.verify = str(control.ca)
        session.cert = (str(pair.cert), str(pair.key))
        return session

    def kubelet_get(
        self, node: int, path: str, client: requests.Session | None = None, **kwargs: Any
    ) -> requests.Response:
        """GET ``path`` of node ``node``'s kubelet (1-based) over HTTPS, as the API server's
        log proxy asks it (a client certificate of the cluster's CA with its rights), or as
        ``client``."""
        if client is None:
            if self._kubelet_client is None:
                self._kubelet_client = self.kubelet_client("kubelet-test-client", allowed=True)
            client = self._kubelet_client
        url = f"https://{marks.NODE_ADDRESSES[node - 1]}:{marks.KUBELET_PORT}{path}"
        return client.get(url, timeout=kwargs.pop("timeout", 10), **kwargs)

    def bound_claim(self, name: str, modes: list[str], size: str = "2Gi") -> None:
        """A PersistentVolumeClaim and a PersistentVolume reserved for it (``claimRef``), which
        kube-controller-manager's binder binds: the scheduler places pods only with bound claims.
        The volume is a directory of this machine that every node reaches (the kubelet mounts it
        as the PV's ``hostPath`` says), writable by any user as an NFS export for a shared pip
        cache would be."""
        directory = claim_directory(name)
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{NAMESPACE}-{name}"},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": modes,
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(directory), "type": "Directory"},
                "claimRef": {"namespace": NAMESPACE, "name": name},
            },
        }
        self.api.create("/api/v1/persistentvolumes", volume)
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "accessModes": modes,
                "storageClassName": "",
                "resources": {"requests": {"storage": size}},
            },
        }
        self.create("persistentvolumeclaims", claim)
        path = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{name}"

        def bound() -> bool:
            return ((self.api.get(path) or {}).get("status") or {}).get("phase") == "Bound"

        wait_for(f"claim {name} bound", bound)

    def history(self, name: str) -> list[JSON]:
        """The pod ``name`` as each ADDED/MODIFIED event of a watch showed it."""
        return [
            o for kind, o in list(self.seen) if kind != "DELETED" and o["metadata"]["name"] == name
        ]

    def ci_runner_kubeconfig(self, namespace: str = NAMESPACE) -> JSON:
        """A kubeconfig with only examples/rbac.yaml's Role in ``namespace`` (applied now)."""
        control = self.side.control
        assert control is not None
        accounts.apply_rbac(self.api, namespace)
        token = accounts.account_token(self.api, namespace)
        return accounts.kubeconfig(control.url, control.ca, token, namespace)

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

    def events(self, name: str) -> list[tuple[str, str]]:
        items, _ = self.api.list(f"/api/v1/namespaces/{NAMESPACE}/events")
        return [(e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == name]


def claim_directory(name: str) -> Path:
    """Where the files of claim ``name`` of :data:`NAMESPACE` are."""
    return marks.CLAIMS / NAMESPACE / name


def pod(name: str, node: str, containers: list[JSON], **spec: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": spec.pop("labels", {})},
        "spec": {"nodeName": node, "containers": containers, **spec},
    }


def container(name: str, *command: str, **fields: Any) -> JSON:
    return {"name": name, "image": IMAGE, "command": list(command), **fields}


def busybox(name: str, *command: str, **fields: Any) -> JSON:
    """A container of the busybox image every node has (never pulled)."""
    return {
        "name": name,
        "image": imagestore.BUSYBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": list(command),
        **fields,
    }


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
def emulated(nodes: int = 2, memory: str = "8Gi") -> Iterator[Emulated]:
    """The emulated cluster with ``nodes`` real nodes (with every image :mod:`.nodeimages`
    makes), each with ``memory`` allocatable, and the namespace :data:`NAMESPACE`."""
    shapes = [realcluster.Shape(f"node-{i + 1}", memory=memory) for i in range(nodes)]
    side = MachineSide(shapes).start()
    cluster: Emulated | None = None
    try:
        accounts.create_namespace(side.api, NAMESPACE)
        cluster = Emulated(side.api, side)
        cluster.recorder = Informer(
            side.api,
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {},
            cluster.seen_event,
            "pod-history",
        ).start()
        yield cluster
    finally:
        if cluster is not None and cluster.recorder is not None:
            cluster.recorder.stop()
        side.stop()
