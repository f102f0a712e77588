"""MPI Operator v0.8.2, the Job controller, the scheduler and the kubelet, for the fake API server.

:class:`MpiOperator` reacts to MPIJob creation the way the controller does (FACTS.md): a
``ValidationError`` Warning Event and no condition for a job it refuses; otherwise Secret
``J-ssh``, ConfigMap ``J-config``, Service ``J``, worker Pods ``J-worker-<i>``, the launcher
batch/v1 Job ``J-launcher`` and its Pod ``J-launcher-<random5>``, with the real labels and
ownerReferences, and the ``Created`` condition. A test then plays the cluster's part through a
:class:`JobScenario` (``operator.job("J")``): pods scheduled or not, running, logging, exiting,
OOMKilled, failing to pull their image, the deadline passing. Conditions move like the
controller moves them: ``Running`` only once the launcher and every worker run; ``Succeeded``
or ``Failed`` (reason copied from the launcher Job, e.g. ``BackoffLimitExceeded/``); with
``cleanPodPolicy: Running`` the running workers are deleted when the job ends.

Each scenario step happens atomically: watchers see all of its changes after it returns.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable
from typing import Any

from tests import crd
from tests.kube_server import EPOCH, FakeKubeServer, rfc3339

JSON = dict[str, Any]
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
MPIJOBS = "mpijobs.kubeflow.org"
# The alphabet Kubernetes uses for generated name suffixes (no vowels, no confusable digits).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
INSUFFICIENT_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)


def owner_reference(owner: JSON, controller: bool = True) -> JSON:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def condition(kind: str, reason: str, message: str, status: str = "True") -> JSON:
    now = rfc3339(EPOCH)
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


class MpiOperator:
    """Watches MPIJob creation in the fake's store and builds what the controller builds."""

    def __init__(self, server: FakeKubeServer, seed: int = 7) -> None:
        self.server = server
        self.store = server.store
        self.rng = random.Random(seed)
        self.store.on_create.append(self._on_create)
        self._events = 0

    def job(self, name: str, namespace: str = "ml") -> JobScenario:
        return JobScenario(self, name, namespace)

    # -- the controller ----------------------------------------------------------------------

    def _on_create(self, key: str, obj: JSON) -> None:
        if key == MPIJOBS:
            self._start(obj)

    def _start(self, mpijob: JSON) -> None:
        ns, name = mpijob["metadata"]["namespace"], mpijob["metadata"]["name"]
        problems = list(crd._controller_rules(mpijob))
        if problems:
            listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            self.event(mpijob, "Warning", "ValidationError", f"Found validation errors: {listed}")
            return
        spec = mpijob["spec"]
        specs = spec["mpiReplicaSpecs"]
        workers = int(specs["Worker"].get("replicas", 1))
        slots = int(spec.get("slotsPerWorker", 1))
        owner = [owner_reference(mpijob)]
        store = self.store
        store.create(
            "secrets",
            ns,
            {
                "metadata": {"name": f"{name}-ssh", "ownerReferences": owner},
                "type": "kubernetes.io/ssh-auth",
                "stringData": {"ssh-privatekey": "fake-key", "ssh-publickey": "fake-pub"},
            },
        )
        hostfile = "".join(
            f"{name}-worker-{i}.{name}.{ns}.svc slots={slots}\n" for i in range(workers)
        )
        store.create(
            "configmaps",
            ns,
            {
                "metadata": {"name": f"{name}-config", "ownerReferences": owner},
                "data": {"hostfile": hostfile, "discover_hosts.sh": "#!/bin/sh\n"},
            },
        )
        store.create(
            "services",
            ns,
            {
                "metadata": {"name": name, "ownerReferences": owner},
                "spec": {"clusterIP": "None", "selector": {JOB_NAME: name}},
            },
        )
        for index in range(workers):
            labels = self._labels(name, "worker") | {REPLICA_INDEX: str(index)}
            store.create(
                "pods",
                ns,
                {
                    "metadata": {
                        "name": f"{name}-worker-{index}",
                        "labels": labels,
                        "ownerReferences": owner,
                    },
                    "spec": self._pod_spec(specs["Worker"], name, f"{name}-worker-{index}"),
                    "status": {"phase": "Pending"},
                },
            )
        launcher_spec = specs["Launcher"]
        run_policy = spec.get("runPolicy", {})
        job = store.create(
            "jobs.batch",
            ns,
            {
                "metadata": {"name": f"{name}-launcher", "ownerReferences": owner},
                "spec": {
                    "backoffLimit": run_policy.get("backoffLimit", 6),
                    "activeDeadlineSeconds": run_policy.get("activeDeadlineSeconds"),
                    "template": launcher_spec.get("template", {}),
                },
                "status": {},
            },
        )
        suffix = "".join(self.rng.choice(SUFFIX_ALPHABET) for _ in range(5))
        labels = self._labels(name, "launcher") | {
            "batch.kubernetes.io/job-name": f"{name}-launcher",
            "job-name": f"{name}-launcher",
        }
        store.create(
            "pods",
            ns,
            {
                "metadata": {
                    "name": f"{name}-launcher-{suffix}",
                    "labels": labels,
                    "ownerReferences": [owner_reference(job)],
                },
                "spec": self._pod_spec(launcher_spec, name, None),
                "status": {"phase": "Pending"},
            },
        )

        def created(obj: JSON) -> None:
            obj["status"] = {
                "conditions": [
                    condition("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
                ],
                "replicaStatuses": {"Launcher": {}, "Worker": {}},
                "startTime": rfc3339(EPOCH),
            }

        store.update(MPIJOBS, ns, name, created)

    @staticmethod
    def _labels(name: str, role: str) -> dict[str, str]:
        return {OPERATOR_LABEL: "mpi-operator", JOB_NAME: name, JOB_ROLE: role}

    @staticmethod
    def _pod_spec(replica: JSON, job: str, hostname: str | None) -> JSON:
        spec: JSON = copy.deepcopy(replica.get("template", {}).get("spec", {}))
        spec["restartPolicy"] = replica.get("restartPolicy", "Never")
        if hostname:
            spec["hostname"], spec["subdomain"] = hostname, job
        return spec

    def event(self, about: JSON, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about ``about``."""
        self._events += 1
        meta = about["metadata"]
        self.store.create(
            "events",
            meta["namespace"],
            {
                "metadata": {"name": f"{meta['name']}.{self._events:x}"},
                "involvedObject": {
                    "apiVersion": about.get("apiVersion", "v1"),
                    "kind": about["kind"],
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta.get("uid", ""),
                },
                "type": kind,
                "reason": reason,
                "message": message,
                "count": 1,
                "firstTimestamp": rfc3339(EPOCH),
                "lastTimestamp": rfc3339(EPOCH),
            },
        )


class JobScenario:
    """The cluster's side of one job, step by step."""

    def __init__(self, operator: MpiOperator, name: str, namespace: str) -> None:
        self.operator = operator
        self.store = operator.store
        self.name = name
        self.namespace = namespace
        self._log_nanos = 0
        self._launcher = ""

    # -- what exists -------------------------------------------------------------------------

    @property
    def mpijob(self) -> JSON:
        return self.store.get(MPIJOBS, self.namespace, self.name)

    @property
    def launcher_pod(self) -> str:
        """The launcher pod's name (random suffix)."""
        pods, _ = self.store.list(
            "pods", self.namespace, f"{JOB_NAME}={self.name},{JOB_ROLE}=launcher"
        )
        if pods:  # remembered: tests name it after the pod is gone too
            self._launcher = str(pods[-1]["metadata"]["name"])
        return self._launcher

    def workers(self) -> list[str]:
        pods, _ = self.store.list(
            "pods", self.namespace, f"{JOB_NAME}={self.name},{JOB_ROLE}=worker"
        )
        return [p["metadata"]["name"] for p in pods]

    def pods(self) -> list[str]:
        pods, _ = self.store.list("pods", self.namespace, f"{JOB_NAME}={self.name}")
        return [p["metadata"]["name"] for p in pods]

    # -- the scheduler -----------------------------------------------------------------------

    def workers_unschedulable(self, message: str = INSUFFICIENT_GPU) -> None:
        """The scheduler finds no node for any worker (and says so in an Event per pod)."""
        with self.store.cond:
            for pod in self.workers():
                self._pod_status(
                    pod,
                    phase="Pending",
                    conditions=[
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                        }
                    ],
                )
                obj = self.store.get("pods", self.namespace, pod)
                self.operator.event(obj, "Warning", "FailedScheduling", message)

    # -- the kubelet -------------------------------------------------------------------------

    def workers_running(self, indexes: Iterable[int] | None = None) -> None:
        """Workers start (sshd) and are Ready."""
        with self.store.cond:
            names = self.workers()
            chosen = [names[i] for i in indexes] if indexes is not None else names
            for pod in chosen:
                self._run(pod)
            self._reconcile()

    def launcher_running(self) -> None:
        with self.store.cond:
            pod = self.launcher_pod
            self._run(pod)
            self.store.log(self.namespace, pod).started = True
            self._reconcile()

    def launcher_log(self, *lines: str, same_time: bool = False) -> None:
        """The launcher writes ``lines`` (a quarter second apart, or all at the last time)."""
        with self.store.cond:
            log = self.store.log(self.namespace, self.launcher_pod)
            for line in lines:
                if not (same_time and log.lines):
                    self._log_nanos += 250_000_000
                log.lines.append((self._log_nanos, line))
            self.store.cond.notify_all()

    def launcher_log_unterminated(self, text: str) -> None:
        """The launcher writes ``text`` with no newline (its last words)."""
        with self.store.cond:
            log = self.store.log(self.namespace, self.launcher_pod)
            self.launcher_log(text)
            log.unterminated.add(len(log.lines) - 1)

    def launcher_log_cut(self, line: str, same_time: bool = False) -> None:
        """The launcher writes ``line``; open log streams break half-way through it."""
        with self.store.cond:
            log = self.store.log(self.namespace, self.launcher_pod)
            self.launcher_log(line, same_time=same_time)
            log.cut_at.add(len(log.lines) - 1)
            self.store.cond.notify_all()

    def launcher_exits(self, code: int) -> None:
        """horovodrun ends with ``code``; the Job and the MPIJob follow."""
        with self.store.cond:
            pod = self.launcher_pod
            reason = "Completed" if code == 0 else "Error"
            self._terminate(pod, code, reason)
            if code == 0:
                self._job_condition("Complete", "", "")
                self._finish(
                    "Succeeded",
                    "MPIJobSucceeded",
                    f"MPIJob {self.namespace}/{self.name} successfully completed.",
                )
            else:
                message = "Job has reached the specified backoff limit"
                self._job_condition("Failed", "BackoffLimitExceeded", message)
                pod_status = self.store.get("pods", self.namespace, pod)["status"]
                self._finish(
                    "Failed",
                    f"BackoffLimitExceeded/{pod_status.get('reason', '')}",
                    f"{message}: {pod_status.get('message', '')}",
                )

    def worker_exits(self, index: int, code: int, reason: str = "Error") -> None:
        with self.store.cond:
            self._terminate(self.workers()[index], code, reason)

    def worker_oom_killed(self, index: int) -> None:
        self.worker_exits(index, 137, "OOMKilled")

    def image_pull_fails(self, pod: str, reason: str = "ErrImagePull") -> None:
        """The kubelet cannot pull ``pod``'s image."""
        with self.store.cond:
            obj = self.store.get("pods", self.namespace, pod)
            container = obj["spec"]["containers"][0]
            image = container["image"]
            message = (
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                "not found"
            )
            self._pod_status(
                pod,
                phase="Pending",
                containers=[
                    {
                        "name": container["name"],
                        "image": image,
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": reason, "message": message}},
                    }
                ],
            )
            self.operator.event(
                obj, "Warning", "Failed", f'Failed to pull image "{image}": {message}'
            )

    def deadline_exceeded(self) -> None:
        """activeDeadlineSeconds passes: the Job controller kills the launcher, the job fails."""
        with self.store.cond:
            message = "Job was active longer than specified deadline"
            self._job_condition("Failed", "DeadlineExceeded", message)
            self.store.delete("pods", self.namespace, self.launcher_pod)
            self._finish("Failed", "DeadlineExceeded", message)

    # -- helpers -----------------------------------------------------------------------------

    def _pod_status(
        self,
        pod: str,
        phase: str,
        conditions: list[JSON] | None = None,
        containers: list[JSON] | None = None,
    ) -> None:
        def change(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = phase
            if conditions is not None:
                status["conditions"] = conditions
            if containers is not None:
                status["containerStatuses"] = containers

        self.store.update("pods", self.namespace, pod, change)

    def _run(self, pod: str) -> None:
        obj = self.store.get("pods", self.namespace, pod)
        container = obj["spec"]["containers"][0]
        ready = [
            {"type": kind, "status": "True"}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        self._pod_status(
            pod,
            "Running",
            ready,
            [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": rfc3339(EPOCH)}},
                }
            ],
        )

    def _terminate(self, pod: str, code: int, reason: str) -> None:
        obj = self.store.get("pods", self.namespace, pod)
        container = obj["spec"]["containers"][0]
        not_ready = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "PodCompleted"},
        ]
        self._pod_status(
            pod,
            "Succeeded" if code == 0 else "Failed",
            not_ready,
            [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason,
                            "startedAt": rfc3339(EPOCH),
                            "finishedAt": rfc3339(EPOCH),
                        }
                    },
                }
            ],
        )
        log = self.store.logs.get((self.namespace, pod))
        if log is not None:
            log.ended = True
            self.store.cond.notify_all()

    def _job_condition(self, kind: str, reason: str, message: str) -> None:
        def change(job: JSON) -> None:
            job.setdefault("status", {})["conditions"] = [condition(kind, reason, message)]

        self.store.update("jobs.batch", self.namespace, f"{self.name}-launcher", change)

    def _reconcile(self) -> None:
        """Running=True once the launcher and every worker run."""
        pods, _ = self.store.list("pods", self.namespace, f"{JOB_NAME}={self.name}")
        if not pods or any(p["status"].get("phase") != "Running" for p in pods):
            return
        mpijob = self.mpijob
        if any(c["type"] == "Running" for c in mpijob["status"].get("conditions", [])):
            return

        def running(obj: JSON) -> None:
            obj["status"]["conditions"].append(
                condition(
                    "Running", "MPIJobRunning", f"MPIJob {self.namespace}/{self.name} is running."
                )
            )

        self.store.update(MPIJOBS, self.namespace, self.name, running)

    def _finish(self, kind: str, reason: str, message: str) -> None:
        def finish(obj: JSON) -> None:
            conditions = obj["status"]["conditions"]
            for cond in conditions:
                if cond["type"] == "Running":
                    cond["status"] = "False"
            conditions.append(condition(kind, reason, message))
            obj["status"]["completionTime"] = rfc3339(EPOCH)

        self.store.update(MPIJOBS, self.namespace, self.name, finish)
        policy = self.mpijob["spec"].get("runPolicy", {}).get("cleanPodPolicy", "None")
        pods, _ = self.store.list(
            "pods", self.namespace, f"{JOB_NAME}={self.name},{JOB_ROLE}=worker"
        )
        for pod in pods:
            running = pod["status"].get("phase") in ("Running", "Pending")
            if policy == "All" or (policy == "Running" and running):
                self.store.delete("pods", self.namespace, pod["metadata"]["name"])
