"""An emulated node's kubelet, a node agent of kube-apiserver as ``system:node:<name>``:
registers its Node, renews its Lease in ``kube-node-lease`` (``pkg/kubelet/nodelease``), watches
the pods the scheduler bound to it (``fieldSelector=spec.nodeName=<node>``), runs each in a
:class:`PodWorker` and serves ``/containerLogs`` over HTTPS for the API server's ``pods/log`` to
the clients a SubjectAccessReview allows (:mod:`.kubeletauth`)."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timezone
from typing import Any

import requests

from testing.emulated_cluster import kubeletauth, marks
from testing.emulated_cluster.api import ApiFailure, Informer, Scope
from testing.emulated_cluster.logserver import LogServer, Tls
from testing.emulated_cluster.node import NodeContext
from testing.emulated_cluster.podworker import PodWorker

JSON = dict[str, Any]
LEASE_SECONDS = 40  # the kubelet's --node-lease-duration-seconds default


class Kubelet:
    """Start with :meth:`start`; :meth:`shutdown` stops every pod (SIGKILL, as a node that is
    switched off) without touching the API objects."""

    def __init__(
        self,
        ctx: NodeContext,
        scope: Scope,
        node: JSON,
        tls: Tls,
        port: int = marks.KUBELET_PORT,
    ) -> None:
        """``node``: the Node object it registers; ``tls``: its serving certificate."""
        self.ctx = ctx
        self.node = node
        self._stopped = threading.Event()
        self._leases = threading.Thread(target=self._renew, name=f"lease-{ctx.node}", daemon=True)
        self.workers: dict[str, PodWorker] = {}  # by uid
        self._lock = threading.Lock()
        self.informer = Informer(
            ctx.api,
            scope.path("pods"),
            {"fieldSelector": f"spec.nodeName={ctx.node}"},
            self._on_pod,
            f"kubelet-{ctx.node}",
        )
        self.logs = LogServer(ctx.node_ip, port, self.find, tls, self._authorize)

    def start(self) -> Kubelet:
        self.logs.start()
        self.register()
        self._renew_once()
        self._leases.start()
        self.informer.start()
        return self

    def register(self) -> None:
        """kubelet_node_status.go registerWithAPIServer: create the Node; one of that name
        already there (a restarted kubelet) gets this status."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for condition in self.node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = condition["lastTransitionTime"] = now
        try:
            self.ctx.api.create("/api/v1/nodes", self.node)
        except ApiFailure as err:
            if err.code != 409:
                raise
            self.ctx.api.merge_patch(
                f"/api/v1/nodes/{self.ctx.node}/status", {"status": self.node["status"]}
            )

    def _lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.ctx.node}"

    def _renew_once(self) -> None:
        """nodelease controller: holder = node name, 40 s duration, renewed every 10 s."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {
            "holderIdentity": self.ctx.node,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now,
        }
        if self.ctx.api.merge_patch(self._lease_path(), {"spec": spec}) is None:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.ctx.node, "namespace": "kube-node-lease"},
                "spec": spec,
            }
            self.ctx.api.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                lease)  # fmt: skip

    def _renew(self) -> None:
        while not self._stopped.wait(LEASE_SECONDS / 4):
            # A failed renewal: the next one tries again, as nodelease does.
            with contextlib.suppress(ApiFailure, requests.RequestException):
                self._renew_once()

    def _authorize(self, user: kubeletauth.User, method: str, path: str) -> None:
        kubeletauth.authorize(self.ctx.api, self.ctx.node, user, method, path)

    def find(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            matches = [
                w for w in self.workers.values() if (w.namespace, w.name) == (namespace, name)
            ]
        return matches[-1] if matches else None

    def _on_pod(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"].get("uid")
        with self._lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker is not None:
                    worker.removed()
                return
            if worker is not None:
                worker.update(pod)
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return  # finished before this kubelet started: nothing of it runs here
            worker = PodWorker(self.ctx, pod)
            self.workers[uid] = worker
            worker.update(pod)
            worker.thread.start()
        threading.Thread(target=self._reap, args=(worker,), daemon=True).start()

    def _reap(self, worker: PodWorker) -> None:
        worker.thread.join()
        with self._lock:
            self.workers.pop(worker.uid, None)

    def shutdown(self) -> None:
        self._stopped.set()
        self.informer.stop()
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.removed()
        for worker in workers:
            worker.thread.join(timeout=30)
        self.logs.stop()
