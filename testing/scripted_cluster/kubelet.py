"""The scripted kubelet: the node agent of the scripted cluster's nodes, driven by the test.

Each node registers its Node as ``system:node:<name>`` (group ``system:nodes``, so the Node
authorizer and NodeRestriction apply), renews its Lease, watches the pods the real scheduler
bound to it and serves their logs (:mod:`.logs`). On its own it does what a kubelet does without
being told: a new pod's first status (Pending, containers waiting), and a pod being deleted has
its containers stopped (sshd exits 0 on SIGTERM, other processes 143) and is deleted with grace 0
(``status_manager.go`` canBeDeleted). What the containers do (start, turn Ready or not, log,
exit) the test says; every status goes through ``pods/<name>/status`` as a
strategic merge patch (:mod:`.podstatus`)."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

from testing.control_plane.run import ControlPlane
from testing.kube_api import Api, ApiFailure, Informer
from testing.node_objects import NodeSpec, node_object, wait_schedulable
from testing.scripted_cluster import podstatus
from testing.scripted_cluster.crilog import LogFile
from testing.scripted_cluster.logs import ContainerLogState, NodeLogServer
from testing.scripted_cluster.logserver import Tls
from testing.waiting import WAIT  # also what a step waits for the control plane

JSON = dict[str, Any]
LEASE_SECONDS = 8  # as the real nodes' (kubeletconfig.py); renewed every quarter of it


def sigterm_exit(container: JSON) -> int:
    """The exit code of ``container``'s process on the kubelet's SIGTERM: 0 for sshd (its
    handler exits cleanly: the ``/usr/sbin/sshd -De`` MPI Operator injects into a worker without
    a command, or ci-runner's sshd.sh, ``sh -c SCRIPT sshd``, which execs it), else 143 (killed
    by the signal)."""
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    runs_sshd = argv[0].endswith("/sshd") or (
        argv[:2] == ["/bin/sh", "-c"] and argv[3:4] == ["sshd"]
    )
    return 0 if runs_sshd else 143


@dataclass
class Log:
    file: LogFile
    state: ContainerLogState


class Node:
    """One node's agent: its client (the node's certificate), log server, pod informer, Lease."""

    def __init__(self, kubelet: ScriptedKubelet, spec: NodeSpec) -> None:
        plane = kubelet.plane
        self.name = spec.name
        self.kubelet = kubelet
        client = plane.client_certificate(f"system:node:{spec.name}", ("system:nodes",))
        self.api = Api(plane.url, ca=plane.ca, cert=(client.cert, client.key))
        serving = plane.serving_certificate(f"kubelet-{spec.name}", "127.0.0.1", spec.name)
        tls = Tls(serving.cert, serving.key, plane.ca)
        self.logs = NodeLogServer(spec.name, self.api, tls, self.find, kubelet.log_state)
        self.object = node_object(spec, self.logs.port, "127.0.0.1")
        self.informer = Informer(
            self.api,
            "/api/v1/pods",
            {"fieldSelector": f"spec.nodeName={spec.name}"},
            kubelet.on_pod,
            f"kubelet-{spec.name}",
        )
        self._stopped = threading.Event()
        self._leases = threading.Thread(target=self._renew, name=f"lease-{spec.name}", daemon=True)

    def start(self) -> None:
        self.logs.start()
        stamp = podstatus.now()
        for condition in self.object["status"]["conditions"]:
            condition["lastHeartbeatTime"] = condition["lastTransitionTime"] = stamp
        self.object["status"]["nodeInfo"] = {
            "containerRuntimeVersion": "containerd://scripted",
            "kubeletVersion": "v1.35.4-scripted",
        }
        self.api.create("/api/v1/nodes", self.object)
        self._renew_once()
        self._leases.start()
        self.informer.start()

    def stop(self) -> None:
        self._stopped.set()
        self.informer.stop()
        self.logs.stop()

    def find(self, namespace: str, name: str) -> JSON | None:
        """The pod with the status this kubelet last wrote (it knows its containers' states
        before the API server's watch tells anyone, its own informer included)."""
        pod = self.informer.known.get(f"{namespace}/{name}")
        if pod is None:
            return None
        written = self.kubelet.statuses.get(pod["metadata"]["uid"])
        return pod if written is None else {**pod, "status": written}

    def _renew_once(self) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        renew = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": renew,
        }
        if self.api.merge_patch(f"{path}/{self.name}", {"spec": spec}) is None:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                "spec": spec,
            }
            self.api.create(path, lease)

    def _renew(self) -> None:
        while not self._stopped.wait(LEASE_SECONDS / 4):
            with contextlib.suppress(ApiFailure, requests.RequestException):
                self._renew_once()


class ScriptedKubelet:
    """The agents of ``nodes`` on ``plane``; log files under ``state``."""

    def __init__(self, plane: ControlPlane, nodes: list[NodeSpec], state: Path) -> None:
        self.plane = plane
        self.state = state
        self.lock = threading.RLock()
        self.nodes = {spec.name: Node(self, spec) for spec in nodes}
        self.logs: dict[tuple[str, str, int], Log] = {}
        self.zones: dict[str, int] = {}  # namespace -> the runtime's zone offset (seconds)
        self.statuses: dict[str, JSON] = {}  # by pod uid: the last status written
        self._seen: set[str] = set()
        self._pod_ips = 0
        self._stamp = 0  # ns of the next log record
        self._last_stamp = 0

    def start(self) -> ScriptedKubelet:
        for node in self.nodes.values():
            node.start()
        wait_schedulable(self.plane.admin_api(), self.nodes, WAIT)
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    # -- what the kubelet does by itself ----------------------------------------------------

    def on_pod(self, kind: str, pod: JSON) -> None:
        if kind == "DELETED":
            return
        meta = pod["metadata"]
        with self.lock:
            if meta["uid"] not in self._seen:
                self._seen.add(meta["uid"])
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    with contextlib.suppress(ApiFailure):
                        self._first_status(pod)
            if meta.get("deletionTimestamp"):
                with contextlib.suppress(ApiFailure, requests.RequestException):
                    self._kill(pod)

    def _node(self, pod: JSON) -> Node:
        return self.nodes[pod["spec"]["nodeName"]]

    def _first_status(self, pod: JSON) -> None:
        """syncPod's first status: Pending, every container waiting to be created."""
        init = pod["spec"].get("initContainers") or []
        waiting = {"waiting": {"reason": "PodInitializing" if init else "ContainerCreating"}}
        status = pod.get("status") or {}
        status["initContainerStatuses"] = [
            podstatus.container(c, {"waiting": {"reason": "PodInitializing"}}) for c in init[:1]
        ] + [podstatus.container(c, {"waiting": {}}) for c in init[1:]]
        if not init:
            del status["initContainerStatuses"]
        status["containerStatuses"] = [
            podstatus.container(c, waiting) for c in pod["spec"]["containers"]
        ]
        status["hostIP"] = "127.0.0.1"
        status["hostIPs"] = [{"ip": "127.0.0.1"}]
        status["startTime"] = podstatus.now()
        self._write(pod, status)

    def _kill(self, pod: JSON) -> None:
        """killPod: containers still running end with 143 (SIGTERM), waiting ones never ran;
        then the pod goes with grace 0, for its uid only."""
        current = self._get(pod)
        if current is None:
            return
        status = current.get("status") or {}
        ended: list[tuple[str, int]] = []
        for entry in (status.get("containerStatuses") or []) + (
            status.get("initContainerStatuses") or []
        ):
            state = entry.get("state") or {}
            if "terminated" in state:
                continue
            code, why = 137, "Error"  # never ran: ContainerStatusUnknown's code
            if "running" in state:
                self._event(current, "Normal", "Killing", f"Stopping container {entry['name']}")
                code = sigterm_exit(self._spec(current, entry["name"]))
                why = "Completed" if code == 0 else "Error"
            entry["state"] = {"terminated": self._terminated(current, code, why, state)}
            entry["ready"], entry["started"] = False, False
            ended.append((entry["name"], int(entry.get("restartCount", 0))))
        if ended and status.get("phase") not in ("Succeeded", "Failed"):
            self._write(current, status)
        for container, restart in ended:
            self._end_log(current, container, restart)
        meta = current["metadata"]
        self._node(current).api.delete_pod_now(meta["namespace"], meta["name"], meta["uid"])

    # -- what a test makes the nodes do -----------------------------------------------------

    def set_gpus(self, node: str, gpus: int) -> None:
        """The node reports ``gpus`` GPUs (a device plugin registered more): the node's own status
        patch, which the scheduler reacts to by trying its unschedulable pods again."""
        count = {"nvidia.com/gpu": str(gpus)}
        patch = {"status": {"capacity": count, "allocatable": count}}
        self.nodes[node].api.strategic_merge_patch(f"/api/v1/nodes/{node}/status", patch)

    # -- what a test makes the containers do ------------------------------------------------

    def pod(self, namespace: str, name: str) -> JSON:
        """The pod once it is bound to one of our nodes and its first status written."""
        deadline = time.monotonic() + WAIT
        while True:
            for node in self.nodes.values():
                found = node.find(namespace, name)
                if found is not None and found["metadata"]["uid"] in self._seen:
                    current = self._get(found)
                    if current is not None and (current.get("status") or {}).get(
                        "containerStatuses"
                    ):
                        return current
            if time.monotonic() > deadline:
                why = self._unscheduled(namespace, name)
                raise AssertionError(f"pod {namespace}/{name} never ran on a scripted node{why}")
            time.sleep(0.05)

    def _unscheduled(self, namespace: str, name: str) -> str:
        """Why the scheduler left the pod unbound (``: <reason>: <message>`` of its PodScheduled
        condition, read as the admin: no node may read a pod not bound to it), or nothing."""
        with contextlib.suppress(ApiFailure, requests.RequestException):
            pod = self.plane.admin_api().get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return f": {condition.get('reason')}: {condition.get('message')}"
        return ""

    @contextlib.contextmanager
    def _holding(self, namespace: str, name: str) -> Iterator[JSON]:
        """The pod (waited for without the lock, which the informers need meanwhile), then
        read again under the lock."""
        pod = self.pod(namespace, name)
        with self.lock:
            current = self._get(pod)
            if current is None:
                raise AssertionError(f"pod {namespace}/{name} is gone")
            yield current

    def run(self, namespace: str, name: str, ready: bool = True) -> None:
        """Init containers completed, every container running; Ready unless ``ready`` is False
        (a failing readiness probe: prober.go's Unhealthy Event)."""
        with self._holding(namespace, name) as pod:
            status = pod["status"]
            stamp = podstatus.now()
            init = pod["spec"].get("initContainers") or []
            if init:
                status["initContainerStatuses"] = [
                    {
                        **podstatus.container(
                            c, {"terminated": self._terminated(pod, 0, "Completed")}
                        ),
                        "restartCount": self._restarts(status, c["name"]),
                    }
                    for c in init
                ]
            status["containerStatuses"] = [
                podstatus.container(c, {"running": {"startedAt": stamp}}, ready=ready, started=True)
                for c in pod["spec"]["containers"]
            ]
            for c in pod["spec"]["containers"]:
                self._open_log(pod, c["name"], 0)
            self._pod_ips += 1
            status.setdefault("podIP", f"10.244.{self._pod_ips // 250}.{self._pod_ips % 250 + 2}")
            status.setdefault("podIPs", [{"ip": status["podIP"]}])
            self._write(pod, status)
            for c in [*init, *pod["spec"]["containers"]]:
                image = c.get("image", "")
                field = "initContainers" if c in init else "containers"
                path = f"spec.{field}{{{c['name']}}}"
                self._event(
                    pod,
                    "Normal",
                    "Pulled",
                    f'Container image "{image}" already present on machine',
                    path,
                )
                self._event(pod, "Normal", "Created", f"Created container: {c['name']}", path)
                self._event(pod, "Normal", "Started", f"Started container {c['name']}", path)
            if not ready:
                self._event(
                    pod, "Warning", "Unhealthy", "Readiness probe failed: connection refused"
                )

    def init_running(self, namespace: str, name: str, container: str) -> None:
        """An init container starts (its log opens)."""
        with self._holding(namespace, name) as pod:
            status = pod["status"]
            entry = self._entry(status, container)
            entry["state"] = {"running": {"startedAt": podstatus.now()}}
            entry["started"] = True
            self._open_log(pod, container, int(entry.get("restartCount", 0)))
            self._write(pod, status)

    def init_fails(
        self, namespace: str, name: str, container: str, code: int, reason: str = "Error"
    ) -> None:
        """An init container exits non-zero: with restartPolicy Never the pod fails."""
        with self._holding(namespace, name) as pod:
            status = pod["status"]
            entry = self._entry(status, container)
            entry["state"] = {"terminated": self._terminated(pod, code, reason, entry.get("state"))}
            entry["started"] = False
            # The status first: a follower whose stream has ended then finds the container
            # terminated, whatever the threads' order (the kubelet's two are not ordered).
            self._write(pod, status)
            self._end_log(pod, container, int(entry.get("restartCount", 0)))

    def exits(
        self, namespace: str, name: str, container: str, code: int, reason: str | None = None
    ) -> None:
        """A container ends; the pod ends once none runs (Succeeded if all exited 0)."""
        with self._holding(namespace, name) as pod:
            status = pod["status"]
            entry = self._entry(status, container)
            why = reason or ("Completed" if code == 0 else "Error")
            entry["state"] = {"terminated": self._terminated(pod, code, why, entry.get("state"))}
            entry["ready"], entry["started"] = False, False
            # The status first: a follower whose stream has ended then finds the container
            # terminated, whatever the threads' order (the kubelet's two are not ordered).
            self._write(pod, status)
            self._end_log(pod, container, int(entry.get("restartCount", 0)))

    # -- logs -------------------------------------------------------------------------------

    def log(
        self,
        namespace: str,
        name: str,
        container: str,
        lines: tuple[str, ...],
        stream: str = "stdout",
        at: int | None = None,
        same_time: bool = False,
        partial: bool = False,
        cut: bool = False,
    ) -> None:
        """``container`` writes ``lines`` (a quarter second apart unless ``at`` (ns) or
        ``same_time``); ``partial``: the last has no newline; ``cut``: the log streams open now
        break half-way through the last."""
        with self._holding(namespace, name) as pod:
            restart = int(self._entry(pod["status"], container).get("restartCount", 0))
            log = self._open_log(pod, container, restart)
            for index, line in enumerate(lines):
                if at is not None:
                    self._stamp = at
                elif not (same_time and self._last_stamp):
                    self._stamp = max(self._last_stamp + 250_000_000, time.time_ns())
                self._last_stamp = max(self._last_stamp, self._stamp)
                last = index == len(lines) - 1
                if cut and last:
                    streams = set(self._node(pod).logs.open)
                    log.state.cuts.append((line.encode() + b"\n", streams))
                log.file.record(stream, line.encode(), partial=partial and last)

    def rotate_log(self, namespace: str, name: str, container: str) -> None:
        """The kubelet rotates ``container``'s current log file."""
        with self._holding(namespace, name) as pod:
            restart = int(self._entry(pod["status"], container).get("restartCount", 0))
            self._open_log(pod, container, restart).file.rotate()

    def log_state(self, uid: str, container: str, restart: int) -> ContainerLogState | None:
        found = self.logs.get((uid, container, restart))
        return found.state if found else None

    def _open_log(self, pod: JSON, container: str, restart: int) -> Log:
        meta = pod["metadata"]
        key = (meta["uid"], container, restart)
        if key not in self.logs:
            directory = self.state / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / container
            file = LogFile(
                directory, restart, lambda: self._stamp, self.zones.get(meta["namespace"])
            )
            self.logs[key] = Log(file, ContainerLogState(file.path))
        return self.logs[key]

    def _end_log(self, pod: JSON, container: str, restart: int) -> None:
        log = self.logs.get((pod["metadata"]["uid"], container, restart))
        if log is not None:
            log.state.running = False

    # -- the API ----------------------------------------------------------------------------

    def _get(self, pod: JSON) -> JSON | None:
        """The pod now, as its node reads it; None once gone or replaced by a new pod of that
        name, which the Node authorizer refuses to show a node it is not bound to (403)."""
        meta = pod["metadata"]
        try:
            found = self._node(pod).api.get(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            )
        except ApiFailure as err:
            if err.code != 403:
                raise
            return None
        if found is None or found["metadata"]["uid"] != meta["uid"]:
            return None
        return found

    def _write(self, pod: JSON, status: JSON) -> None:
        """Phase and conditions from the containers; the patch through pods/status."""
        status["phase"] = podstatus.phase(pod["spec"], status)
        status["conditions"] = podstatus.conditions(status, status.get("conditions") or [])
        meta = pod["metadata"]
        self._node(pod).api.strategic_merge_patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            podstatus.status_patch(status),
        )
        self.statuses[meta["uid"]] = copy.deepcopy(status)

    def _event(
        self, pod: JSON, kind: str, reason: str, message: str, field_path: str | None = None
    ) -> None:
        node = self._node(pod)
        node.api.event(
            {**pod, "kind": "Pod", "apiVersion": "v1"},
            kind,
            reason,
            message,
            "kubelet",
            node.name,
            field_path,
        )

    def _terminated(self, pod: JSON, code: int, reason: str, before: JSON | None = None) -> JSON:
        return podstatus.terminated(code, reason, before, f"containerd://{pod['metadata']['uid']}")

    @staticmethod
    def _entry(status: JSON, container: str) -> JSON:
        entries = (status.get("containerStatuses") or []) + (
            status.get("initContainerStatuses") or []
        )
        return next(e for e in entries if e["name"] == container)

    @staticmethod
    def _restarts(status: JSON, container: str) -> int:
        entries = status.get("initContainerStatuses") or []
        return next((int(e.get("restartCount", 0)) for e in entries if e["name"] == container), 0)

    @staticmethod
    def _spec(pod: JSON, container: str) -> JSON:
        spec = pod["spec"]
        return next(
            c
            for c in spec["containers"] + (spec.get("initContainers") or [])
            if c["name"] == container
        )
