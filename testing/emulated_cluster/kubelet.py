"""An emulated node's kubelet: watches the pods bound to its node (``fieldSelector=
spec.nodeName=<node>``), runs each in a :class:`PodWorker`, serves ``/containerLogs``."""

from __future__ import annotations

import threading
from typing import Any

from testing.emulated_cluster import marks
from testing.emulated_cluster.api import Informer, Scope
from testing.emulated_cluster.logserver import LogServer
from testing.emulated_cluster.node import NodeContext
from testing.emulated_cluster.podworker import PodWorker

JSON = dict[str, Any]


class Kubelet:
    """Start with :meth:`start`; :meth:`shutdown` stops every pod (SIGKILL, as a node that is
    switched off) without touching the API objects."""

    def __init__(self, ctx: NodeContext, scope: Scope, port: int = marks.KUBELET_PORT) -> None:
        self.ctx = ctx
        self.workers: dict[str, PodWorker] = {}  # by uid
        self._lock = threading.Lock()
        self.informer = Informer(
            ctx.api,
            scope.path("pods"),
            {"fieldSelector": f"spec.nodeName={ctx.node}"},
            self._on_pod,
            f"kubelet-{ctx.node}",
        )
        self.logs = LogServer(ctx.node_ip, port, self.find)

    def start(self) -> Kubelet:
        self.logs.start()
        self.informer.start()
        return self

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
        self.informer.stop()
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.removed()
        for worker in workers:
            worker.thread.join(timeout=30)
        self.logs.stop()
