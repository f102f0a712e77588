"""MPI Operator v0.8.2's MPIJob controller, as a client of the fake API server.

It reacts to MPIJobs, their pods and their launcher Job (handleObject: an object's controller
owner is queued) and runs ``syncHandler`` rule by rule. Line numbers are
``pkg/controller/mpi_job_controller.go`` (status helpers: ``mpi_job_controller_status.go``) at
v0.8.2 (release-0.8 commit b10758d). A sync that failed (e.g. a pod create refused by quota) is
retried on every tick of control-plane time, as the rate-limited work queue retries it.
"""

from __future__ import annotations

import copy
from typing import Any

from testing.fake_kube import crd
from testing.fake_kube.control_plane import mpi_objects as objects
from testing.fake_kube.control_plane.client import LocalApi, condition_true, controlled_by
from testing.fake_kube.server import FakeKubeServer
from testing.fake_kube.store import ApiError

JSON = dict[str, Any]
MPIJOBS = "mpijobs.kubeflow.org"
EVENT_LIMIT = 1024  # :115 eventMessageLimit


def truncate(message: str) -> str:
    """:1831 truncateMessage."""
    return message if len(message) <= EVENT_LIMIT else message[: EVENT_LIMIT - 3] + "..."


class SyncError(Exception):
    """syncHandler returned an error: the key is requeued."""


class MpiJobController:
    def __init__(self, server: FakeKubeServer, cluster_domain: str = "") -> None:
        self.api = LocalApi(server, "mpi-job-controller")
        self.cluster_domain = cluster_domain
        self.retry: set[tuple[str, str]] = set()
        server.store.listeners.append(self.on_change)
        server.tickers.append(self.on_tick)

    # -- the informers' handlers -------------------------------------------------------------

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        meta = obj["metadata"]
        if key == MPIJOBS and event != "DELETED":
            self.sync(meta["namespace"], meta["name"])  # :1236 addMPIJob / update
        elif key in ("pods", "jobs.batch", "configmaps", "services", "secrets"):
            # :1262 handleObject: the controller owner, when it is an MPIJob.
            for ref in meta.get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "MPIJob":
                    self.sync(meta["namespace"], ref["name"])
                elif ref.get("controller") and ref.get("kind") == "Job" and key == "pods":
                    job = self.api.get("jobs.batch", meta["namespace"], ref["name"])
                    for owner in (job or {}).get("metadata", {}).get("ownerReferences") or []:
                        if owner.get("controller") and owner.get("kind") == "MPIJob":
                            self.sync(meta["namespace"], owner["name"])

    def on_tick(self) -> None:
        for namespace, name in sorted(self.retry):
            self.sync(namespace, name)

    def sync(self, namespace: str, name: str) -> None:
        try:
            self._sync(namespace, name)
        except (SyncError, ApiError):
            self.retry.add((namespace, name))
        else:
            self.retry.discard((namespace, name))

    # -- syncHandler (:567) -------------------------------------------------------------------

    def _sync(self, namespace: str, name: str) -> None:
        shared = self.api.get(MPIJOBS, namespace, name)
        if shared is None:
            return  # :584-588 deleted
        job = objects.defaulted(shared)  # :597-598 DeepCopy + Default
        if job["metadata"].get("deletionTimestamp"):
            return  # :604-606 terminating
        problems = list(crd._controller_rules(job))
        if problems:  # :608-613 an Event, no condition, no requeue
            listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            self.api.event(
                job, "Warning", "ValidationError", truncate(f"Found validation errors: {listed}")
            )
            return
        status = job.setdefault("status", {})
        old = copy.deepcopy(status)
        if not status.get("conditions"):  # :615-620
            msg = f"MPIJob {namespace}/{name} is created."
            self._condition(status, "Created", "True", "MPIJobCreated", msg)
            self.api.event(job, "Normal", "MPIJobCreated", msg)
        if self._finished(status) and status.get("completionTime"):  # :625-633
            if job["spec"]["runPolicy"]["cleanPodPolicy"] in ("All", "Running"):
                self._delete_workers(job)
                status.setdefault("replicaStatuses", {})["Worker"] = {}  # :743-754
                self._write_status(job, old)
            return
        if not status.get("startTime"):
            status["startTime"] = self.api.timestamp()  # :636-639
        launcher = self.api.get("jobs.batch", namespace, f"{name}-launcher")  # :758 getLauncherJob
        if launcher is not None and not controlled_by(launcher, job):
            self._resource_exists(job, launcher)
        workers: list[JSON] = []
        done = launcher is not None and self._job_finished(launcher)  # :649
        if not done:
            self._get_or_create(job, "services", objects.new_service(job))  # :651
            self._config_map(job)  # :656
            self._get_or_create(job, "secrets", None)  # :660
            workers = self._workers(job)  # :672
            if launcher is None:
                ready = sum(1 for w in workers if condition_true(w, "Ready"))
                policy = job["spec"]["launcherCreationPolicy"]
                if policy == "AtStartup" or ready == len(workers):  # :678
                    template, warned = objects.new_launcher_template(job)
                    if warned:  # :1640-1644
                        self.api.event(
                            job,
                            "Warning",
                            "SetPodTemplateRestartPolicy",
                            "Restart policy in pod template overridden by restart policy in "
                            "replica spec",
                        )
                    try:
                        launcher = self.api.create(
                            "jobs.batch", namespace, objects.new_launcher_job(job, template)
                        )
                    except ApiError as err:  # :680-683
                        self.api.event(
                            job,
                            "Warning",
                            "MPIJobFailed",
                            f"launcher pod created failed: {err.message}",
                        )
                        raise SyncError from err
        self._update_status(job, old, launcher, workers)  # :735

    # -- getOrCreate* --------------------------------------------------------------------------

    def _resource_exists(self, job: JSON, obj: JSON) -> None:
        # :99, :103 ErrResourceExists / MessageResourceExists.
        msg = (
            f'Resource "{obj["metadata"]["name"]}" of Kind "{obj["kind"]}" already exists and '
            "is not managed by MPIJob"
        )
        self.api.event(job, "Warning", "ErrResourceExists", msg)
        raise SyncError(msg)

    def _get_or_create(self, job: JSON, key: str, new: JSON | None) -> JSON:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        wanted = f"{name}-ssh" if key == "secrets" else name
        found = self.api.get(key, namespace, wanted)
        if found is None:  # :915-917, :942-948
            return self.api.create(key, namespace, new or objects.new_ssh_secret(job))
        if not controlled_by(found, job):  # :921-925, :952-956
            self._resource_exists(job, found)
        if key == "services" and new is not None:  # :928-934 selector drift is repaired
            spec = found["spec"]
            if (
                spec.get("selector") != new["spec"]["selector"]
                or bool(spec.get("publishNotReadyAddresses"))
                != new["spec"]["publishNotReadyAddresses"]
            ):
                spec["selector"] = new["spec"]["selector"]
                spec["publishNotReadyAddresses"] = new["spec"]["publishNotReadyAddresses"]
                return self.api.update(key, namespace, found)
        if key == "secrets":  # :957-967 a secret whose keys differ gets new keys
            wanted_keys = ["ssh-privatekey", "ssh-publickey"]
            if sorted(found.get("data") or {}) != wanted_keys:
                fresh = objects.new_ssh_secret(job)
                found.pop("data", None)
                found["stringData"] = fresh["stringData"]
                return self.api.update(key, namespace, found)
        return found

    def _config_map(self, job: JSON) -> None:
        """:875 getOrCreateConfigMap: hostfile plus discover_hosts.sh of the running workers."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        selector = ",".join(f"{k}={v}" for k, v in objects.default_labels(name, "worker").items())
        running = [  # :840-857 getRunningWorkerPods
            p["metadata"]["name"]
            for p in self.api.list("pods", namespace, selector)
            if p.get("status", {}).get("phase") == "Running"
        ]
        new = objects.new_config_map(job, running, self.cluster_domain)
        found = self.api.get("configmaps", namespace, f"{name}-config")
        if found is None:
            self.api.create("configmaps", namespace, new)  # :885-887
            return
        if not controlled_by(found, job):
            self._resource_exists(job, found)  # :894-899
        if found.get("data") != new["data"]:  # :901-908
            found["data"] = new["data"]
            self.api.update("configmaps", namespace, found)

    def _workers(self, job: JSON) -> list[JSON]:
        """:982 getOrCreateWorker: only missing pods are created; nothing is replaced."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        replicas = objects.worker_replicas(job)
        selector = ",".join(f"{k}={v}" for k, v in objects.default_labels(name, "worker").items())
        existing = self.api.list("pods", namespace, selector)
        if len(existing) > replicas:  # :998-1016 scale down
            for pod in existing:
                index = pod["metadata"].get("labels", {}).get(objects.REPLICA_INDEX, "")
                if index.isdigit() and int(index) >= replicas:
                    self.api.delete("pods", namespace, pod["metadata"]["name"])
        pods = []
        for index in range(replicas):
            pod = self.api.get("pods", namespace, f"{name}-worker-{index}")
            if pod is None:  # :1020-1023
                try:
                    pod = self.api.create("pods", namespace, objects.new_worker(job, index))
                except ApiError as err:  # :1027-1030
                    self.api.event(
                        job, "Warning", "MPIJobFailed", f"worker pod created failed: {err.message}"
                    )
                    raise SyncError from err
            if not controlled_by(pod, job):  # :1033-1037
                self._resource_exists(job, pod)
            pods.append(pod)
        return pods

    def _delete_workers(self, job: JSON) -> None:
        """:1052 deleteWorkerPods: Running keeps workers that ended (not Running, not Pending)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        policy = job["spec"]["runPolicy"]["cleanPodPolicy"]
        for index in range(objects.worker_replicas(job)):
            pod = self.api.get("pods", namespace, f"{name}-worker-{index}")
            if pod is None:
                continue  # :1067-1069
            if not controlled_by(pod, job):
                self._resource_exists(job, pod)
            phase = pod.get("status", {}).get("phase")
            if policy == "Running" and phase not in ("Running", "Pending"):
                continue  # :1081-1084
            if not pod["metadata"].get("deletionTimestamp"):
                self.api.delete("pods", namespace, pod["metadata"]["name"])  # :1085

    # -- status (:1094 updateMPIJobStatus) ---------------------------------------------------

    @staticmethod
    def _finished(status: JSON) -> bool:
        return any(  # _status.go :87-97 isFinished
            c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
            for c in status.get("conditions") or []
        )

    @staticmethod
    def _job_finished(job: JSON) -> bool:
        return bool(condition_true(job, "Complete") or condition_true(job, "Failed"))  # :1730

    def _condition(self, status: JSON, kind: str, state: str, reason: str, message: str) -> bool:
        """_status.go :51 updateMPIJobConditions / :102 setCondition / :122 filterOutCondition."""
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c["type"] == kind), None)
        if current and current["status"] == state and current["reason"] == reason:
            return False  # :106-108
        now = self.api.timestamp()
        new = {
            "type": kind,
            "status": state,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
        if current and current["status"] == state:
            new["lastTransitionTime"] = current["lastTransitionTime"]  # :111-113
        kept = []
        for cond in conditions:
            if cond["type"] == kind:
                continue
            if kind in ("Failed", "Succeeded") and cond["type"] in ("Running", "Failed"):
                cond = {**cond, "status": "False"}  # :136-139
            kept.append(cond)
        status["conditions"] = [*kept, new]
        return True

    def _update_status(
        self, job: JSON, old: JSON, launcher: JSON | None, workers: list[JSON]
    ) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        status = job["status"]
        replicas = status.setdefault("replicaStatuses", {})
        launcher_running = 0
        if launcher is not None:
            match = launcher["spec"].get("selector", {}).get("matchLabels") or {}
            selector = ",".join(f"{k}={v}" for k, v in match.items())
            pods = [  # :1694 jobPods: pods of the Job's selector it controls
                p for p in self.api.list("pods", namespace, selector) if controlled_by(p, launcher)
            ]
            launcher_running = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
            counts: JSON = {}  # :1118 initializeMPIJobStatuses
            if launcher.get("status", {}).get("failed"):
                counts["failed"] = launcher["status"]["failed"]  # :1120
            if condition_true(launcher, "Complete"):  # :1121-1129
                counts["succeeded"] = 1
                msg = f"MPIJob {namespace}/{name} successfully completed."
                self.api.event(job, "Normal", "MPIJobSucceeded", msg)
                if not status.get("completionTime"):
                    status["completionTime"] = launcher["status"].get("completionTime")
                self._condition(status, "Succeeded", "True", "MPIJobSucceeded", msg)
            elif condition_true(launcher, "Failed"):  # :1130-1131
                self._failed(job, launcher, pods)
            elif launcher_running:
                counts["active"] = launcher_running  # :1133
            replicas["Launcher"] = counts
        running = evicted = 0
        worker_counts: JSON = {}
        for pod in workers:  # :1145-1158
            phase = pod.get("status", {}).get("phase")
            if phase == "Failed":
                worker_counts["failed"] = worker_counts.get("failed", 0) + 1
                evicted += pod["status"].get("reason") == "Evicted"
            elif phase == "Succeeded":
                worker_counts["succeeded"] = worker_counts.get("succeeded", 0) + 1
            elif phase == "Running":
                running += 1
                worker_counts["active"] = worker_counts.get("active", 0) + 1
        replicas["Worker"] = worker_counts
        if evicted:  # :1159-1164
            msg = f"{evicted}/{len(workers)} workers are evicted"
            self._condition(status, "Failed", "True", "MPIJobEvicted", msg)
            self.api.event(job, "Warning", "MPIJobEvicted", msg)
        if self._finished(status):  # :1169-1188
            if not any(c["type"] == "Running" for c in status["conditions"]):
                stamp = status.get("completionTime") or self.api.timestamp()
                status["conditions"].append(
                    {
                        "type": "Running",
                        "status": "False",
                        "reason": "MPIJobRunning",
                        "message": f"MPIJob {namespace}/{name} is finished but Running condition "
                        "was never set.",
                        "lastUpdateTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                )
        elif launcher is not None and launcher_running >= 1 and running == len(workers):
            msg = f"MPIJob {namespace}/{name} is running."  # :1189-1193
            if self._condition(status, "Running", "True", "MPIJobRunning", msg):
                self.api.event(
                    job, "Normal", "MPIJobRunning", f"MPIJob {namespace}/{name} is running"
                )
        self._write_status(job, old)

    def _failed(self, job: JSON, launcher: JSON, pods: list[JSON]) -> None:
        """:1202 updateMPIJobFailedStatus: the launcher Job's reason, with the last failed pod's
        reason and message after BackoffLimitExceeded."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        failed = condition_true(launcher, "Failed") or {}
        reason = failed.get("reason") or "MPIJobFailed"
        msg = failed.get("message") or f"MPIJob {namespace}/{name} has failed"
        if reason == "BackoffLimitExceeded":  # :1212-1224
            last = None
            for pod in pods:
                if pod.get("status", {}).get("phase") == "Failed" and (
                    last is None
                    or last["metadata"]["creationTimestamp"] < pod["metadata"]["creationTimestamp"]
                ):
                    last = pod
            if last is not None:
                reason += "/" + last["status"].get("reason", "")
                msg = truncate(msg + ": " + last["status"].get("message", ""))
        self.api.event(job, "Warning", reason, msg)  # :1226
        status = job["status"]
        if not status.get("completionTime"):
            status["completionTime"] = self.api.timestamp()  # :1227-1230
        self._condition(status, "Failed", "True", reason, msg)

    def _write_status(self, job: JSON, old: JSON) -> None:
        if job["status"] != old:  # :1196-1198 only when it changed
            self.api.update_status(MPIJOBS, job["metadata"]["namespace"], job)
