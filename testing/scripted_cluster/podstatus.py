"""Pod status as the kubelet writes it, pure: container statuses
(``kuberuntime_manager.go``/``kubelet_pods.go`` convertToAPIContainerStatuses), the phase
(``kubelet_pods.go`` getPhase) and the conditions (``pkg/kubelet/status/generate.go``), and the
strategic merge patch the status manager sends (``status_manager.go`` mergePodStatus +
``statusutil.PatchPodStatus``: conditions merge by type, so a condition the API server or a
controller set, e.g. DisruptionTarget or PodScheduled, stays)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

JSON = dict[str, Any]
# The conditions the kubelet owns (status_manager.go kubeletManagedConditions + generate.go).
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def container(spec: JSON, state: JSON, ready: bool = False, started: bool = False) -> JSON:
    """One containerStatuses entry."""
    return {
        "name": spec["name"],
        "image": spec.get("image", ""),
        "imageID": "",
        "ready": ready,
        "started": started,
        "restartCount": 0,
        "state": state,
    }


def terminated(code: int, reason: str, before: JSON | None, container_id: str) -> JSON:
    """A terminated state; startedAt from the running state it ends."""
    started = ((before or {}).get("running") or {}).get("startedAt", now())
    return {
        "exitCode": code,
        "reason": reason,
        "startedAt": started,
        "finishedAt": now(),
        "containerID": container_id,
    }


def phase(spec: JSON, status: JSON) -> str:
    """getPhase for restartPolicy Never (what MPI Operator's pods use): Pending until init
    containers completed and a container started, Failed on a failed init container, then
    Running while any runs, Succeeded if all exited 0, else Failed."""
    init = status.get("initContainerStatuses") or []
    for entry in init:
        ended = (entry.get("state") or {}).get("terminated")
        if ended and ended["exitCode"] != 0 and spec.get("restartPolicy") == "Never":
            return "Failed"
    states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
    if not states or all("waiting" in s for s in states):
        return "Pending"
    if all("terminated" in s for s in states):
        codes = [s["terminated"]["exitCode"] for s in states]
        return "Succeeded" if all(c == 0 for c in codes) else "Failed"
    return "Running"


def conditions(status: JSON, previous: list[JSON]) -> list[JSON]:
    """generate.go: PodReadyToStartContainers, Initialized, Ready, ContainersReady (reason
    PodCompleted once the pod ended); lastTransitionTime kept while a status stays."""
    terminal = status.get("phase") in ("Succeeded", "Failed")
    init = status.get("initContainerStatuses") or []
    pending_init = [
        s["name"]
        for s in init
        if "terminated" not in s.get("state", {}) or s["state"]["terminated"]["exitCode"] != 0
    ]
    containers = status.get("containerStatuses") or []
    unready = [s["name"] for s in containers if not s.get("ready")]
    ready = status.get("phase") == "Running" and not unready
    before = {c["type"]: c for c in previous}

    def cond(kind: str, ok: bool, reason: str = "", message: str = "") -> JSON:
        value = "True" if ok else "False"
        old = before.get(kind) or {}
        stamp = old["lastTransitionTime"] if old.get("status") == value else now()
        c: JSON = {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        }
        if not ok and reason:
            c["reason"] = "PodCompleted" if terminal else reason
            if not terminal:
                c["message"] = message
        return c

    return [
        cond("PodReadyToStartContainers", not terminal),
        cond(
            "Initialized",
            not pending_init or (terminal and not init),
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
        ),
        cond(
            "Ready",
            ready,
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(unready)}]",
        ),
        cond(
            "ContainersReady",
            ready,
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(unready)}]",
        ),
    ]


def status_patch(status: JSON) -> JSON:
    """The strategic merge patch of a pod's status: every field the kubelet owns, its own
    conditions (merged by type by the API server: the others stay)."""
    owned = [c for c in status.get("conditions") or [] if c["type"] in KUBELET_CONDITIONS]
    body = {key: value for key, value in status.items() if key != "conditions"}
    body["conditions"] = owned
    return {"status": body}
