"""The scenario steps on the scripted cluster (:class:`JobScenario`: workers running, the launcher
logging, exiting...): the test plays the nodes' part (:mod:`.kubelet`) on the pods the real MPI
Operator and Job controller created. Time is real
here: a step waits (bounded) for what the control plane has to do first, never blindly."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from testing.kube_api import Api
from testing.scripted_cluster.kubelet import ScriptedKubelet
from testing.waiting import WAIT, wait_for

JSON = dict[str, Any]
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
# How long a step waits for the Job controller to make the launcher pod: a sync of the launcher Job
# that failed (a conflict with MPI Operator's own writes of that Job, as on a resume) is retried
# after 1 s doubling to 60 s (pkg/controller/job/job_controller.go, DefaultJobApiBackOff and
# MaxJobApiBackOff), so two or three conflicts in a row pass WAIT.
LAUNCHER_WAIT = 3 * WAIT


class Log(Protocol):
    """ci-runner's log as a test reads it (:class:`testing.ci_log.CiLog`)."""

    def wait_for(self, line: str) -> None: ...


class JobScenario:
    """The nodes' side of one MPIJob, step by step."""

    def __init__(
        self, admin: Api, kubelet: ScriptedKubelet | None, name: str, namespace: str
    ) -> None:
        self.admin = admin
        self._kubelet = kubelet
        self.name = name
        self.namespace = namespace
        self._launcher = ""

    @property
    def kubelet(self) -> ScriptedKubelet:
        assert self._kubelet is not None, "real nodes: no scripted kubelet"
        return self._kubelet

    # -- what exists -------------------------------------------------------------------------

    @property
    def submitted(self) -> str:
        """What ci-runner logs once it has created this MPIJob."""
        return f"[ci-runner] submitted MPIJob {self.name} in namespace {self.namespace}"

    @property
    def mpijob(self) -> JSON:
        found = self.admin.get(MPIJOBS.format(ns=self.namespace) + f"/{self.name}")
        assert found is not None, f"MPIJob {self.name} is gone"
        return found

    def listed(self, role: str | None = None) -> list[JSON]:
        """The job's pods (of ``role``: launcher, worker) as the API lists them, oldest first."""
        selector = f"{JOB_NAME}={self.name}" + (f",{JOB_ROLE}={role}" if role else "")
        pods, _ = self.admin.list(
            f"/api/v1/namespaces/{self.namespace}/pods", {"labelSelector": selector}
        )
        return sorted(pods, key=lambda p: str(p["metadata"]["creationTimestamp"]))

    @property
    def launcher_pod(self) -> str:
        """The launcher pod the test last acted on (random suffix), else the newest listed; a
        replacement the Job controller makes meanwhile does not change which pod is named."""
        if not self._launcher:
            pods = self.listed("launcher")
            if pods:
                self._launcher = str(pods[-1]["metadata"]["name"])
        return self._launcher

    def workers(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.listed("worker")]

    def pods(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.listed()]

    def _worker(self, index: int) -> str:
        return f"{self.name}-worker-{index}"

    def _replicas(self) -> int:
        return int(self.mpijob["spec"]["mpiReplicaSpecs"]["Worker"].get("replicas", 1))

    def _launcher_now(self) -> str:
        """The launcher pod not ended: the one acted on before while it lasts, else the newest."""

        def probe() -> str | None:
            names = [
                str(p["metadata"]["name"])
                for p in self.listed("launcher")
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and not p["metadata"].get("deletionTimestamp")
            ]
            if self._launcher in names:
                return self._launcher
            return names[-1] if names else None

        try:
            self._launcher = wait_for(
                f"a running launcher pod of {self.name}", probe, timeout=LAUNCHER_WAIT
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; {self._launcher_job_state()}") from None
        return self._launcher

    def _launcher_job_state(self) -> str:
        """The launcher Job as the Job controller left it, and its Events: what a launcher pod
        that never came waits for."""
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{self.name}-launcher"
        job = self.admin.get(path)
        if job is None:
            return f"no Job {self.name}-launcher"
        status = job.get("status") or {}
        conditions = [
            (c.get("type"), c.get("status"), c.get("reason"))
            for c in status.get("conditions") or []
        ]
        events, _ = self.admin.list(
            f"/api/v1/namespaces/{self.namespace}/events",
            {"fieldSelector": f"involvedObject.name={self.name}-launcher"},
        )
        said = [f"{e.get('reason')}: {e.get('message')}" for e in events]
        return (
            f"Job {self.name}-launcher: suspend={job['spec'].get('suspend')}, "
            f"active={status.get('active')}, failed={status.get('failed')}, "
            f"startTime={status.get('startTime')}, conditions={conditions}, events={said}"
        )

    def _main(self, pod: str) -> str:
        return str(self.kubelet.pod(self.namespace, pod)["spec"]["containers"][0]["name"])

    # -- the kubelet -------------------------------------------------------------------------

    def workers_running(self, indexes: Iterable[int] | None = None) -> None:
        """Workers start (sshd) and are Ready."""
        chosen = list(indexes) if indexes is not None else list(range(self._replicas()))
        for index in chosen:
            self.kubelet.run(self.namespace, self._worker(index))

    def workers_unschedulable(self) -> str:
        """Until the real scheduler found no node for any worker (PodScheduled False,
        Unschedulable; its FailedScheduling Events recorded): its message."""

        def probe() -> str | None:
            pods = self.listed("worker")
            messages = [_unschedulable(p) for p in pods]
            if len(pods) < self._replicas() or not all(messages):
                return None
            return messages[0]

        return wait_for(f"every worker of {self.name} unschedulable", probe)

    def worker_never_ready(self, index: int) -> None:
        """A worker runs but its readiness probe keeps failing."""
        self.kubelet.run(self.namespace, self._worker(index), ready=False)

    def worker_init_fails(
        self, index: int, container: str, code: int, *lines: str, reason: str = "Error"
    ) -> None:
        """An init container of a worker logs ``lines`` (stderr) and exits ``code``."""
        pod = self._worker(index)
        self.kubelet.init_running(self.namespace, pod, container)
        if lines:
            self.kubelet.log(self.namespace, pod, container, lines, stream="stderr")
        self.kubelet.init_fails(self.namespace, pod, container, code, reason)

    def launcher_created(self) -> str:
        """The launcher pod, once the Job controller made it (not yet running): its name."""
        return self._launcher_now()

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

    def to_the_launcher(self, log: Log, *lines: str) -> None:
        """The workers and the launcher come up and the launcher logs ``lines``, each step once
        ci-runner's ``log`` shows it."""
        self.workers_running()
        replicas = self._replicas()
        log.wait_for(f"[ci-runner] workers ready {replicas}/{replicas}")
        self.launcher_running()
        log.wait_for(f"[ci-runner] launcher running (pod {self.launcher_pod})")
        self.launcher_log(*lines)
        log.wait_for(lines[-1])

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
        self.kubelet.rotate_log(self.namespace, pod, self._main(pod))

    def launcher_exits(self, code: int) -> None:
        """horovodrun ends with ``code``."""
        pod = self._launcher_now()
        self.kubelet.exits(self.namespace, pod, self._main(pod), code)

    def worker_exits(self, index: int, code: int, reason: str = "Error") -> None:
        pod = self._worker(index)
        self.kubelet.exits(self.namespace, pod, self._main(pod), code, reason)

    def worker_oom_killed(self, index: int) -> None:
        self.worker_exits(index, 137, "OOMKilled")

    def worker_evicted(self, index: int) -> None:
        """An administrator (a drain) evicts a worker through the Eviction API (policy/v1):
        kube-apiserver adds its DisruptionTarget condition and deletes it; the kubelet then stops
        it (sshd exits 0: the pod ends Succeeded) and the pod goes."""
        pod = self.kubelet.pod(self.namespace, self._worker(index))
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/eviction"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod["metadata"]["name"], "namespace": self.namespace},
        }
        self.admin.create(path, body)
        uid = pod["metadata"]["uid"]
        wait_for(
            f"evicted worker {pod['metadata']['name']} gone",
            lambda: all(p["metadata"]["uid"] != uid for p in self.listed("worker")),
        )

    def deadline_exceeded(self) -> None:
        """The launcher Job's activeDeadlineSeconds passed (short in the manifest: time is
        real here): the Job controller failed it."""

        def failed() -> bool:
            job = self.admin.get(
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{self.name}-launcher"
            )
            conditions = ((job or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)

        wait_for(f"the launcher Job of {self.name} failed", failed, timeout=WAIT * 2)


def _unschedulable(pod: JSON) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", ""))
    return None
