"""The default scheduler's filtering, as a client of the fake API server.

A pending pod without ``spec.nodeName`` is bound (POST ``pods/{name}/binding``) to the first node
that passes the filters, in the order of the default profile (kubernetes
``pkg/scheduler/apis/config/v1/default_plugins.go``): NodeUnschedulable, TaintToleration,
NodeAffinity (nodeSelector), NodeResourcesFit (requests against allocatable minus the requests of
the pods already bound there, and the pod count). When no node fits, the pod gets
``PodScheduled=False`` (Unschedulable) and a ``FailedScheduling`` Warning Event whose message is
``FitError.Error()`` (``pkg/scheduler/framework/types.go``) followed by the default preemption
plugin's diagnosis. Unschedulable pods are tried again when a node or a pod changes, and at least
every 5 minutes (``podMaxInUnschedulablePodsDuration``).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from testing.fake_kube.admission import pod_requests, quantity
from testing.fake_kube.control_plane.client import LocalApi
from testing.fake_kube.server import FakeKubeServer

JSON = dict[str, Any]
RETRY_SECONDS = 300
UNRESOLVABLE = (
    "node(s) had untolerated taint",
    "node(s) didn't match",
    "node(s) were unschedulable",
)


def tolerates(pod: JSON, taint: JSON) -> bool:
    """k8s.io/api/core/v1/toleration.go ToleratesTaint."""
    for tol in pod["spec"].get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


class Scheduler:
    def __init__(self, server: FakeKubeServer) -> None:
        self.api = LocalApi(server, "default-scheduler")
        self.tried: dict[tuple[str, str], float] = {}  # unschedulable pods, last attempt
        server.store.listeners.append(self.on_change)
        server.tickers.append(self.on_tick)

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        pod = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if key == "pods" and event != "DELETED" and not obj["spec"].get("nodeName"):
            # An unschedulable pod's own updates do not requeue it (scheduling_queue.go
            # isPodUpdated ignores status-only changes).
            if event == "ADDED" or pod not in self.tried:
                self.schedule(*pod)
        elif key == "nodes" or (key == "pods" and event == "DELETED"):
            self.retry()

    def on_tick(self) -> None:
        for (namespace, name), at in list(self.tried.items()):
            if self.api.now - at >= RETRY_SECONDS:
                self.schedule(namespace, name)

    def retry(self) -> None:
        """Move every unschedulable pod back to the active queue (a cluster event)."""
        for namespace, name in list(self.tried):
            self.schedule(namespace, name)

    def schedule(self, namespace: str, name: str) -> None:
        pod = self.api.get("pods", namespace, name)
        if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            self.tried.pop((namespace, name), None)
            return
        if pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        nodes = self.api.list("nodes", "")
        bound = [p for p in self.api.list("pods", "") if p["spec"].get("nodeName")]
        reasons: Counter[str] = Counter()
        for node in nodes:
            problems = self._filter(pod, node, bound)
            if not problems:
                self.tried.pop((namespace, name), None)
                self.api.bind(namespace, name, node["metadata"]["name"])
                # schedule_one.go handleBindingCycle: the Scheduled Event.
                self.api.event(
                    pod,
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {namespace}/{name} to {node['metadata']['name']}",
                )
                return
            reasons.update(problems)
        self.tried[(namespace, name)] = self.api.now
        message = self._fit_error(len(nodes), reasons, pod)
        status = pod.setdefault("status", {"phase": "Pending"})
        others = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
        status["conditions"] = [
            *others,
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": self.api.timestamp(),
            },
        ]
        status.setdefault("phase", "Pending")
        self.api.update_status("pods", namespace, pod)
        self.api.event(pod, "Warning", "FailedScheduling", message)

    def _filter(self, pod: JSON, node: JSON, bound: list[JSON]) -> list[str]:
        """The first failing filter's reasons for ``node`` (empty when it fits)."""
        spec = node.get("spec") or {}
        if spec.get("unschedulable"):
            return ["node(s) were unschedulable"]  # nodeunschedulable.go ErrReasonUnschedulable
        for taint in spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
                # tainttoleration/taint_toleration.go Filter
                return [
                    f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
                ]
        labels = node["metadata"].get("labels") or {}
        selector = pod["spec"].get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            return ["node(s) didn't match Pod's node affinity/selector"]  # nodeaffinity.go
        # noderesources/fit.go fitsRequest: every insufficient resource is a reason.
        allocatable = node.get("status", {}).get("allocatable") or {}
        here = [
            p
            for p in bound
            if p["spec"]["nodeName"] == node["metadata"]["name"]
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        problems = []
        if len(here) + 1 > int(allocatable.get("pods", 110)):
            problems.append("Too many pods")
        used: dict[str, Fraction] = {}
        for other in here:
            for res, amount in pod_requests(other).items():
                used[res] = used.get(res, Fraction(0)) + amount
        for res, amount in sorted(pod_requests(pod).items()):
            have = quantity(allocatable.get(res, 0))
            if amount > 0 and used.get(res, Fraction(0)) + amount > have:
                problems.append(f"Insufficient {res}")
        return problems

    @staticmethod
    def _fit_error(total: int, reasons: Counter[str], pod: JSON) -> str:
        """types.go FitError.Error(): ``0/N nodes are available: <count reason>, ...`` sorted,
        then the preemption plugin's PostFilter message (default_preemption.go)."""
        histogram = sorted(f" {count} {reason}" for reason, count in reasons.items())
        message = f"0/{total} nodes are available:" + ",".join(histogram) + "."
        helpless = sum(c for r, c in reasons.items() if r.startswith(UNRESOLVABLE))
        victims = total - helpless
        parts = []
        if victims:
            parts.append(f"{victims} No preemption victims found for incoming pod")
        if helpless:
            parts.append(f"{helpless} Preemption is not helpful for scheduling")
        preemption = f"preemption: 0/{total} nodes are available: " + ", ".join(sorted(parts)) + "."
        return f"{message} {preemption}"
