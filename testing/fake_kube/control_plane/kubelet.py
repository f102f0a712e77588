"""A scripted kubelet for unit tests: the nodes' side of the cluster interface, driven by the test.

It registers its Nodes, watches the pods bound to them and writes their status only through
``pods/{name}/status``; a test says what each container does (start, turn Ready or not, log,
exit, be OOMKilled, fail an init container, fail to pull its image for a while). It serves
``GET /containerLogs/<ns>/<pod>/<container>`` from CRI-format logs (``cri_log.py``) on loopback,
at the port its Nodes advertise, and deletes a pod being deleted once its containers stopped
(gracePeriodSeconds=0), as the kubelet does. Texts and rules: kubernetes ``pkg/kubelet/``
(``status/generate.go`` conditions, ``kubelet_pods.go`` validateContainerLogStatus and phase,
``images/image_manager.go`` pull events and back-off, ``kuberuntime`` container states).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from testing.fake_kube.control_plane.client import LocalApi
from testing.fake_kube.control_plane.cri_log import ContainerLog, Entry
from testing.fake_kube.http import QuietServer, abort, chunk, end_chunked, start_chunked
from testing.fake_kube.server import FakeKubeServer
from testing.node_objects import NodeSpec, node_object

JSON = dict[str, Any]
IMAGE_BACKOFF = 10  # pkg/kubelet/kubelet.go backOffPeriod; doubled up to MaxContainerBackOff
MAX_BACKOFF = 300


@dataclass
class Pull:
    """An image that fails to pull ``failures`` more times, then succeeds."""

    container: str
    failures: int
    message: str
    next_try: float = 0.0
    attempts: int = 0
    backing_off: bool = False  # ImagePullBackOff reported since the last try


class ScriptedKubelet:
    """The kubelets of ``nodes``; one HTTP endpoint on loopback serves their container logs."""

    def __init__(self, server: FakeKubeServer, nodes: list[NodeSpec]) -> None:
        self.server = server
        self.nodes = {n.name: n for n in nodes}
        self.cond = threading.Condition()
        self.logs: dict[tuple[str, str, str, int], ContainerLog] = {}
        self.pulls: dict[tuple[str, str], Pull] = {}
        # containers ignore SIGTERM: pods go at the end of their grace period
        self.slow_termination = False
        self.open_streams = 0  # /containerLogs requests being answered
        self.refused: list[str] = []  # the error texts /containerLogs answered
        self._seen: set[str] = set()
        self._log_nanos = 0
        self._stopping = False
        self._httpd = QuietServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        server.store.listeners.append(self.on_change)
        server.tickers.append(self.on_tick)
        server.on_stop.append(self.stop)
        for node in nodes:
            self.api(node.name).create(
                "nodes", "", node_object(node, self._httpd.server_address[1])
            )

    def stop(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def api(self, node: str) -> LocalApi:
        return LocalApi(self.server, "kubelet", host=node)

    # -- reacting to pods ----------------------------------------------------------------------

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        if key != "pods" or obj["spec"].get("nodeName") not in self.nodes or event == "DELETED":
            return
        meta = obj["metadata"]
        if meta["uid"] not in self._seen:
            self._seen.add(meta["uid"])
            self._start(obj)
        if meta.get("deletionTimestamp") and not self.slow_termination:
            self._kill(obj)

    def on_tick(self) -> None:
        for (namespace, name), pull in list(self.pulls.items()):
            if self.server.store.now >= pull.next_try:
                self._try_pull(namespace, name, pull)
            elif not pull.backing_off:
                self.back_off(namespace, name)  # the next pod sync, during the back-off
        if self.slow_termination:
            for pod in self.api("").list("pods", ""):
                stamp = pod["metadata"].get("deletionTimestamp")
                mine = pod["spec"].get("nodeName") in self.nodes
                if stamp and mine and self.server.store.timestamp() >= stamp:
                    self._kill(pod)

    def _start(self, pod: JSON) -> None:
        """syncPod's first status: Pending, every container waiting to be created."""
        init = pod["spec"].get("initContainers") or []
        waiting = {"waiting": {"reason": "PodInitializing" if init else "ContainerCreating"}}
        self._write(
            pod,
            "Pending",
            [self._container(c, {"waiting": {"reason": "PodInitializing"}}) for c in init[:1]]
            + [self._container(c, {"waiting": {}}) for c in init[1:]],
            [self._container(c, waiting) for c in pod["spec"]["containers"]],
            started=True,
        )

    def _kill(self, pod: JSON) -> None:
        """killPod: running containers end (SIGTERM, exit 143), then the pod is deleted with
        gracePeriodSeconds=0 (status_manager.go canBeDeleted / TerminatePod)."""
        current = self.api(pod["spec"]["nodeName"]).get(
            "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]
        )
        if current is None:
            return
        status = current.get("status") or {}
        changed = False
        for cstatus in status.get("containerStatuses") or []:
            state = cstatus.get("state", {})
            if "terminated" not in state:
                if "running" in state:  # kuberuntime_container.go killContainer
                    self.api(pod["spec"]["nodeName"]).event(
                        current, "Normal", "Killing", f"Stopping container {cstatus['name']}"
                    )
                cstatus["state"] = {
                    "terminated": self._terminated(
                        143 if "running" in state else 137, "Error", state
                    )
                }
                cstatus["ready"], cstatus["started"] = False, False
                changed = True
            self._stop_log(current, cstatus["name"], cstatus.get("restartCount", 0))
        if changed and status.get("phase") not in ("Succeeded", "Failed"):
            # kubelet_pods.go getPhase: a pod stopped by deletion with restartPolicy Never or
            # containers that failed is Failed.
            codes = [c["state"]["terminated"]["exitCode"] for c in status["containerStatuses"]]
            status["phase"] = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            self._conditions(current, status, ready=False)
            self.api(current["spec"]["nodeName"]).update_status(
                "pods", current["metadata"]["namespace"], current
            )
        self.api(current["spec"]["nodeName"]).delete(
            "pods", current["metadata"]["namespace"], current["metadata"]["name"], grace=0
        )

    # -- what a test makes the containers do -----------------------------------------------------

    def pod(self, namespace: str, name: str) -> JSON:
        pod = self.api("").get("pods", namespace, name)
        if pod is None or pod["spec"].get("nodeName") not in self.nodes:
            raise AssertionError(f"pod {namespace}/{name} is not on a node of this kubelet")
        return pod

    def run(self, namespace: str, name: str, ready: bool = True) -> None:
        """Init containers completed, every container running; Ready unless ``ready`` is False
        (a readiness probe failing: an Unhealthy Event, as prober.go records it)."""
        with self.server.store.batch():
            pod = self.pod(namespace, name)
            init = [
                self._container(c, {"terminated": self._terminated(0, "Completed")})
                for c in pod["spec"].get("initContainers") or []
            ]
            containers = []
            for c in pod["spec"]["containers"]:
                status = self._container(
                    c, {"running": {"startedAt": self.server.store.timestamp()}}
                )
                status["ready"], status["started"] = ready, True
                containers.append(status)
                self._open_log(pod, c["name"], 0)
            self._write(pod, "Running", init, containers)
            api = self.api(pod["spec"]["nodeName"])
            for c in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
                # kuberuntime_container.go startContainer: the lifecycle Events.
                image = c.get("image", "")
                api.event(
                    pod, "Normal", "Pulled", f'Container image "{image}" already present on machine'
                )
                api.event(pod, "Normal", "Created", f"Created container: {c['name']}")
                api.event(pod, "Normal", "Started", f"Started container {c['name']}")
            if not ready:
                self.api(pod["spec"]["nodeName"]).event(
                    pod,
                    "Warning",
                    "Unhealthy",
                    "Readiness probe failed: connection refused",
                )

    def init_fails(
        self, namespace: str, name: str, container: str, code: int, reason: str = "Error"
    ) -> None:
        """An init container exits non-zero: with restartPolicy Never the pod fails
        (kubelet_pods.go getPhase), otherwise it restarts after a back-off (CrashLoopBackOff)."""
        with self.server.store.batch():
            pod = self.pod(namespace, name)
            status = pod["status"]
            statuses = status.get("initContainerStatuses") or []
            entry = next(s for s in statuses if s["name"] == container)
            terminated = self._terminated(code, reason, entry.get("state", {}))
            self._stop_log(pod, container, entry.get("restartCount", 0))
            never = pod["spec"].get("restartPolicy", "Always") == "Never"
            if never:
                entry["state"] = {"terminated": terminated}
                status["phase"] = "Failed"
            else:
                entry["lastState"] = {"terminated": terminated}
                entry["restartCount"] = entry.get("restartCount", 0) + 1
                entry["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off 10s restarting failed container={container} "
                        f"pod={name}_{namespace}({pod['metadata']['uid']})",
                    }
                }
            self._conditions(pod, status, ready=False)
            self.api(pod["spec"]["nodeName"]).update_status("pods", namespace, pod)
            if not never:
                self.api(pod["spec"]["nodeName"]).event(
                    pod,
                    "Warning",
                    "BackOff",
                    "Back-off restarting failed container "
                    f"{container} in pod {name}_{namespace}({pod['metadata']['uid']})",
                )

    def init_running(self, namespace: str, name: str, container: str) -> None:
        """An init container starts (its log opens)."""
        with self.server.store.batch():
            pod = self.pod(namespace, name)
            status = pod["status"]
            entry = next(
                s for s in status.get("initContainerStatuses") or [] if s["name"] == container
            )
            entry["state"] = {"running": {"startedAt": self.server.store.timestamp()}}
            entry["started"] = True
            self._open_log(pod, container, entry.get("restartCount", 0))
            self.api(pod["spec"]["nodeName"]).update_status("pods", namespace, pod)

    def exits(
        self, namespace: str, name: str, container: str, code: int, reason: str | None = None
    ) -> None:
        """A container ends; the pod ends when no container is left running (restartPolicy
        Never): Succeeded if every container exited 0, else Failed."""
        with self.server.store.batch():
            pod = self.pod(namespace, name)
            status = pod["status"]
            entry = next(s for s in status["containerStatuses"] if s["name"] == container)
            reason = reason or ("Completed" if code == 0 else "Error")
            entry["state"] = {"terminated": self._terminated(code, reason, entry.get("state", {}))}
            entry["ready"], entry["started"] = False, False
            self._stop_log(pod, container, entry.get("restartCount", 0))
            states = [s["state"] for s in status["containerStatuses"]]
            if all("terminated" in s for s in states):
                codes = [s["terminated"]["exitCode"] for s in states]
                status["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
            self._conditions(pod, status, ready=False)
            self.api(pod["spec"]["nodeName"]).update_status("pods", namespace, pod)

    def image_pull_fails(
        self, namespace: str, name: str, container: str, failures: int, message: str
    ) -> None:
        """The image of ``container`` fails to pull ``failures`` times (ErrImagePull, then
        ImagePullBackOff between tries, 10 s doubled up to 300 s), then pulls."""
        with self.server.store.batch():
            pull = Pull(container, failures, message)
            self.pulls[(namespace, name)] = pull
            self._try_pull(namespace, name, pull)

    def _try_pull(self, namespace: str, name: str, pull: Pull) -> None:
        pod = self.pod(namespace, name)
        api = self.api(pod["spec"]["nodeName"])
        spec = next(
            c
            for c in pod["spec"]["containers"] + (pod["spec"].get("initContainers") or [])
            if c["name"] == pull.container
        )
        image = spec.get("image", "")
        statuses = pod["status"].get("containerStatuses", []) + pod["status"].get(
            "initContainerStatuses", []
        )
        entry = next(s for s in statuses if s["name"] == pull.container)
        api.event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
        if pull.attempts >= pull.failures:
            del self.pulls[(namespace, name)]
            api.event(
                pod,
                "Normal",
                "Pulled",
                f'Successfully pulled image "{image}" in 1.5s (1.5s including waiting). '
                "Image size: 1024 bytes.",
            )
            entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
        else:
            pull.attempts += 1
            # image_manager.go EnsureImageExists: the pull error, then ErrImagePull.
            api.event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {pull.message}')
            api.event(pod, "Warning", "Failed", "Error: ErrImagePull")
            entry["state"] = {"waiting": {"reason": "ErrImagePull", "message": pull.message}}
            delay = min(IMAGE_BACKOFF * 2 ** (pull.attempts - 1), MAX_BACKOFF)
            pull.next_try = self.server.store.now + delay
            pull.backing_off = False
        api.update_status("pods", namespace, pod)

    def back_off(self, namespace: str, name: str) -> None:
        """Between two pull tries the kubelet reports ImagePullBackOff (the next sync)."""
        with self.server.store.batch():
            pod = self.pod(namespace, name)
            pull = self.pulls[(namespace, name)]
            pull.backing_off = True
            spec = next(
                c
                for c in pod["spec"]["containers"] + (pod["spec"].get("initContainers") or [])
                if c["name"] == pull.container
            )
            statuses = pod["status"].get("containerStatuses", []) + pod["status"].get(
                "initContainerStatuses", []
            )
            entry = next(s for s in statuses if s["name"] == pull.container)
            message = f'Back-off pulling image "{spec.get("image", "")}"'
            entry["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": message}}
            api = self.api(pod["spec"]["nodeName"])
            api.update_status("pods", namespace, pod)
            api.event(pod, "Normal", "BackOff", message)
            api.event(pod, "Warning", "Failed", "Error: ImagePullBackOff")

    # -- logs ------------------------------------------------------------------------------------

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
        ``same_time``); ``partial``: the last has no newline; ``cut``: streams break in it."""
        pod = self.pod(namespace, name)
        statuses = pod["status"].get("containerStatuses", []) + pod["status"].get(
            "initContainerStatuses", []
        )
        restart = next((s.get("restartCount", 0) for s in statuses if s["name"] == container), 0)
        log = self._open_log(pod, container, restart)
        for index, line in enumerate(lines):
            if at is not None:
                nanos = at
            elif same_time and self._log_nanos:
                nanos = self._log_nanos
            else:
                nanos = max(self._log_nanos + 250_000_000, int(self.server.store.now * 1e9))
            self._log_nanos = max(self._log_nanos, nanos)
            last = index == len(lines) - 1
            log.write(
                Entry(nanos, stream, "P" if partial and last else "F", line), cut=cut and last
            )

    def container_log(
        self, namespace: str, name: str, container: str, restart: int = 0
    ) -> ContainerLog:
        pod = self.pod(namespace, name)
        return self._open_log(pod, container, restart)

    def _open_log(self, pod: JSON, container: str, restart: int) -> ContainerLog:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"], container, restart)
        with self.cond:
            if key not in self.logs:
                zone = self.nodes[pod["spec"]["nodeName"]].zone
                self.logs[key] = ContainerLog(zone, self.cond)
            return self.logs[key]

    def _stop_log(self, pod: JSON, container: str, restart: int) -> None:
        self._open_log(pod, container, restart).stop()

    # -- status ----------------------------------------------------------------------------------

    def _container(self, spec: JSON, state: JSON) -> JSON:
        return {
            "name": spec["name"],
            "image": spec.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": state,
        }

    def _terminated(self, code: int, reason: str, before: JSON | None = None) -> JSON:
        started = ((before or {}).get("running") or {}).get(
            "startedAt", self.server.store.timestamp()
        )
        return {
            "exitCode": code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": self.server.store.timestamp(),
            "containerID": "containerd://0",
        }

    def _write(
        self, pod: JSON, phase: str, init: list[JSON], containers: list[JSON], started: bool = False
    ) -> None:
        status = pod.setdefault("status", {})
        status["phase"] = phase
        if init:
            status["initContainerStatuses"] = init
        status["containerStatuses"] = containers
        status.setdefault("hostIP", "127.0.0.1")
        status.setdefault("hostIPs", [{"ip": "127.0.0.1"}])
        status.setdefault("startTime", self.server.store.timestamp())
        status.setdefault("qosClass", "BestEffort")
        if phase == "Running":
            index = sorted(self._seen).index(pod["metadata"]["uid"]) + 2
            status.setdefault("podIP", f"10.244.0.{index}")
            status.setdefault("podIPs", [{"ip": status["podIP"]}])
        ready = phase == "Running" and all(c.get("ready") for c in containers)
        self._conditions(pod, status, ready)
        self.api(pod["spec"]["nodeName"]).update_status("pods", pod["metadata"]["namespace"], pod)

    def _conditions(self, pod: JSON, status: JSON, ready: bool) -> None:
        """status/generate.go: Initialized, ContainersReady, Ready (PodCompleted once ended)."""
        now = self.server.store.timestamp()
        terminal = status.get("phase") in ("Succeeded", "Failed")
        init = status.get("initContainerStatuses") or []
        pending_init = [
            s["name"]
            for s in init
            if "terminated" not in s.get("state", {}) or s["state"]["terminated"]["exitCode"] != 0
        ]
        unready = [s["name"] for s in status.get("containerStatuses") or [] if not s.get("ready")]

        def cond(kind: str, ok: bool, reason: str, message: str) -> JSON:
            c: JSON = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now}
            if not ok:
                c["reason"] = "PodCompleted" if terminal else reason
                if not terminal:
                    c["message"] = message
            return c

        scheduled = [c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"]
        status["conditions"] = [
            {
                "type": "PodReadyToStartContainers",
                "status": "False" if terminal else "True",
                "lastTransitionTime": now,
            },
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
            *copy.deepcopy(scheduled),
        ]

    # -- /containerLogs --------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                kubelet._serve_logs(self)

        return Handler

    def _error(self, handler: BaseHTTPRequestHandler, code: int, text: str) -> None:
        with self.server.store.cond:  # so that FakeKubeServer.wait_until sees it
            self.refused.append(text)
            self.server.store.cond.notify_all()
        data = text.encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _serve_logs(self, handler: BaseHTTPRequestHandler) -> None:
        """server.go getContainerLogs + kubelet_pods.go validateContainerLogStatus."""
        url = urlsplit(handler.path)
        parts = url.path.split("/")
        query = dict(parse_qsl(url.query))
        if len(parts) != 5 or parts[1] != "containerLogs":
            self._error(handler, 404, "404 page not found")
            return
        _, _, namespace, name, container = parts
        pod = self.api("").get("pods", namespace, name)
        if pod is None or pod["spec"].get("nodeName") not in self.nodes:
            self._error(handler, 404, f'pod "{name}" does not exist')
            return
        status = pod.get("status") or {}
        statuses = status.get("containerStatuses", []) + status.get("initContainerStatuses", [])
        entry = next((s for s in statuses if s["name"] == container), None)
        if entry is None:
            self._error(handler, 400, f'container "{container}" in pod "{name}" is not available')
            return
        state, last = entry.get("state", {}), entry.get("lastState", {})
        restart = int(entry.get("restartCount", 0))
        if query.get("previous") == "true":
            if "terminated" not in last:
                self._error(
                    handler,
                    400,
                    f'previous terminated container "{container}" in pod "{name}" not found',
                )
                return
            restart -= 1
        elif "running" not in state and "terminated" not in state:
            if "terminated" in last:
                restart -= 1
            else:
                reason = state.get("waiting", {}).get("reason", "")
                why = {
                    "ErrImagePull": "image can't be pulled",
                    "ImagePullBackOff": "trying and failing to pull image",
                }.get(reason, reason)
                self._error(
                    handler,
                    400,
                    f'container "{container}" in pod "{name}" is waiting to start: {why}',
                )
                return
        log = self._open_log(pod, container, restart)
        start_chunked(handler, "text/plain")
        self._streams(+1)
        try:
            for piece, cut in log.read(
                query, lambda: self.server.store.now, lambda: self._stopping
            ):
                if not chunk(handler, piece):
                    return
                if cut:
                    abort(handler)
                    return
            end_chunked(handler)
        finally:
            self._streams(-1)

    def _streams(self, change: int) -> None:
        with self.server.store.cond:  # so that FakeKubeServer.wait_until sees it
            self.open_streams += change
            self.server.store.cond.notify_all()
