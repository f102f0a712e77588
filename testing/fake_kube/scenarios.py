"""The cluster around the fake API server for unit tests, and the scenario steps tests play.

``MpiOperator(server)`` starts the control plane (``control_plane/``: garbage collector,
scheduler, Job and TTL controllers, MPI Operator v0.8.2, and a scripted kubelet for three GPU
nodes). Everything the operator does follows from API objects: a test only plays the nodes'
part through a :class:`JobScenario` (``operator.job("J")``): containers starting, turning Ready
or not, logging, exiting, OOMKilled, an init container failing, an image failing to pull for a
while, and control-plane time passing (deadline, TTL, back-off). Each step is one batch: watchers
see it and everything the controllers did about it together.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from testing.fake_kube.control_plane import ControlPlane, NodeSpec
from testing.fake_kube.control_plane.client import LocalApi, condition_true
from testing.fake_kube.control_plane.job_controller import seconds
from testing.fake_kube.control_plane.kubelet import ScriptedKubelet
from testing.fake_kube.control_plane.mpi_objects import JOB_NAME, JOB_ROLE
from testing.fake_kube.server import FakeKubeServer

JSON = dict[str, Any]
MPIJOBS = "mpijobs.kubeflow.org"
INSUFFICIENT_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)
PULL_NOT_FOUND = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found'
)
FOREVER = 10**9


class MpiOperator:
    """The control plane of a fake cluster (named for what tests mostly want from it)."""

    def __init__(
        self,
        server: FakeKubeServer,
        nodes: list[NodeSpec] | None = None,
        zone: timedelta | None = None,
    ) -> None:
        if zone is not None:
            nodes = [NodeSpec(f"node-{i}", zone=zone) for i in range(1, 4)]
        self.server = server
        self.store = server.store
        self.control = ControlPlane(server, nodes)
        assert self.control.kubelet is not None
        self.kubelet: ScriptedKubelet = self.control.kubelet
        self._api = LocalApi(server, "test")

    def job(self, name: str, namespace: str = "ml") -> JobScenario:
        return JobScenario(self, name, namespace)

    def event(self, about: JSON, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about ``about``."""
        self._api.event(about, kind, reason, message)

    def set_allocatable(self, resource: str, value: str) -> None:
        """Every node now offers ``value`` of ``resource`` (its Node status, as a device plugin
        or the kubelet reports it)."""
        with self.store.batch():
            for node in self._api.list("nodes", ""):
                node["status"]["allocatable"][resource] = value
                node["status"]["capacity"][resource] = value
                self._api.update_status("nodes", "", node)


class JobScenario:
    """The nodes' side of one job, step by step."""

    def __init__(self, operator: MpiOperator, name: str, namespace: str) -> None:
        self.operator = operator
        self.server = operator.server
        self.store = operator.store
        self.kubelet = operator.kubelet
        self.name = name
        self.namespace = namespace
        self._launcher = ""

    # -- what exists -------------------------------------------------------------------------

    @property
    def mpijob(self) -> JSON:
        return self.store.get(MPIJOBS, self.namespace, self.name)

    def _pods(self, role: str | None = None) -> list[JSON]:
        selector = f"{JOB_NAME}={self.name}" + (f",{JOB_ROLE}={role}" if role else "")
        pods, _ = self.store.list("pods", self.namespace, selector)
        return pods

    @property
    def launcher_pod(self) -> str:
        """The newest launcher pod's name (random suffix); remembered once it is gone."""
        pods = self._pods("launcher")
        if pods:
            newest = max(pods, key=lambda p: int(p["metadata"]["uid"].split("-")[1]))
            self._launcher = str(newest["metadata"]["name"])
        return self._launcher

    def launcher_pods(self) -> list[str]:
        pods = sorted(self._pods("launcher"), key=lambda p: int(p["metadata"]["uid"].split("-")[1]))
        return [p["metadata"]["name"] for p in pods]

    def workers(self) -> list[str]:
        return [p["metadata"]["name"] for p in self._pods("worker")]

    def pods(self) -> list[str]:
        return [p["metadata"]["name"] for p in self._pods()]

    def _worker(self, index: int) -> str:
        return f"{self.name}-worker-{index}"

    def _launcher_now(self) -> str:
        pod = self.launcher_pod
        if self.store.find(MPIJOBS, self.namespace, self.name) is None:
            raise AssertionError(f"MPIJob {self.name} is gone (deleted)")
        if not pod or self.store.find("pods", self.namespace, pod) is None:
            raise AssertionError(
                f"no launcher pod for {self.name}: the operator has not created the launcher Job "
                f"(launcherCreationPolicy WaitForWorkersReady waits for every worker to be Ready)"
            )
        return pod

    def _main(self, pod: str) -> str:
        return str(self.store.get("pods", self.namespace, pod)["spec"]["containers"][0]["name"])

    # -- the scheduler -----------------------------------------------------------------------

    def workers_unschedulable(self, message: str = INSUFFICIENT_GPU) -> None:
        """The scheduler tries the workers again, in vain (needs nodes without room, e.g.
        ``operator.set_allocatable("nvidia.com/gpu", "0")`` before the job is submitted)."""
        with self.store.batch():
            self.operator.control.scheduler.retry()
        for pod in self._pods("worker"):
            scheduled = next(
                (c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"),
                {},
            )
            if scheduled.get("message") != message:
                raise AssertionError(f"{pod['metadata']['name']} is not unschedulable: {scheduled}")

    # -- the kubelet -------------------------------------------------------------------------

    def workers_running(self, indexes: Iterable[int] | None = None) -> None:
        """Workers start (sshd) and are Ready."""
        with self.store.batch():
            names = self.workers()
            chosen = [names[i] for i in indexes] if indexes is not None else names
            for pod in chosen:
                self.kubelet.run(self.namespace, pod)

    def worker_never_ready(self, index: int) -> None:
        """A worker runs but its readiness probe keeps failing."""
        self.kubelet.run(self.namespace, self._worker(index), ready=False)

    def worker_init_fails(
        self, index: int, container: str, code: int, *lines: str, reason: str = "Error"
    ) -> None:
        """An init container of a worker logs ``lines`` (stderr) and exits ``code``."""
        with self.store.batch():
            pod = self._worker(index)
            self.kubelet.init_running(self.namespace, pod, container)
            if lines:
                self.kubelet.log(self.namespace, pod, container, lines, stream="stderr")
            self.kubelet.init_fails(self.namespace, pod, container, code, reason)

    def launcher_running(self) -> None:
        self.kubelet.run(self.namespace, self._launcher_now())

    def launcher_log(
        self, *lines: str, same_time: bool = False, stream: str = "stdout", at: int | None = None
    ) -> None:
        """The launcher writes ``lines`` (a quarter second apart, or all at the last time)."""
        pod = self._launcher_now()
        self.kubelet.log(
            self.namespace, pod, self._main(pod), lines, stream=stream, at=at, same_time=same_time
        )

    def launcher_log_unterminated(self, text: str) -> None:
        """The launcher writes ``text`` with no newline (its last words)."""
        pod = self._launcher_now()
        self.kubelet.log(self.namespace, pod, self._main(pod), (text,), partial=True)

    def launcher_log_cut(self, line: str, same_time: bool = False) -> None:
        """The launcher writes ``line``; open log streams break half-way through it."""
        pod = self._launcher_now()
        self.kubelet.log(
            self.namespace, pod, self._main(pod), (line,), same_time=same_time, cut=True
        )

    def rotate_launcher_log(self) -> None:
        """The kubelet rotates the launcher's log file."""
        pod = self._launcher_now()
        self.kubelet.container_log(self.namespace, pod, self._main(pod)).rotate()

    def launcher_exits(self, code: int) -> None:
        """horovodrun ends with ``code`` (other containers, e.g. a sidecar, then stop with 0);
        the Job controller and the operator follow."""
        with self.store.batch():
            pod = self._launcher_now()
            spec = self.store.get("pods", self.namespace, pod)["spec"]["containers"]
            self.kubelet.exits(self.namespace, pod, spec[0]["name"], code)
            for sidecar in spec[1:]:
                self.kubelet.exits(self.namespace, pod, sidecar["name"], 0)

    def worker_exits(self, index: int, code: int, reason: str = "Error") -> None:
        pod = self.workers()[index]
        self.kubelet.exits(self.namespace, pod, self._main(pod), code, reason)

    def worker_oom_killed(self, index: int) -> None:
        self.worker_exits(index, 137, "OOMKilled")

    def image_pull_fails(
        self, pod: str, reason: str = "ErrImagePull", failures: int = FOREVER
    ) -> None:
        """The kubelet cannot pull ``pod``'s image (``failures`` times, then it can)."""
        obj = self.store.get("pods", self.namespace, pod)
        container = obj["spec"]["containers"][0]
        message = PULL_NOT_FOUND.format(image=container.get("image", ""))
        self.kubelet.image_pull_fails(self.namespace, pod, container["name"], failures, message)
        if reason == "ImagePullBackOff":
            self.kubelet.back_off(self.namespace, pod)

    def deadline_exceeded(self) -> None:
        """activeDeadlineSeconds of the launcher Job passes (control-plane time moves)."""
        job = self.store.get("jobs.batch", self.namespace, f"{self.name}-launcher")
        deadline = int(job["spec"]["activeDeadlineSeconds"])
        left = seconds(job["status"]["startTime"]) + deadline - self.store.now
        self.server.advance(max(left, 0) + 1)
        assert condition_true(
            self.store.get("jobs.batch", self.namespace, f"{self.name}-launcher"), "Failed"
        )
