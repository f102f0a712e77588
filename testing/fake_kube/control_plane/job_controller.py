"""The batch/v1 Job controller and the TTL-after-finished controller, for NonIndexed Jobs of one
pod (the MPI Operator's launcher), as clients of the fake API server.

Rules from kubernetes ``pkg/controller/job/job_controller.go`` (syncJob, manageJob,
exceedsBackoffLimit, pastActiveDeadline, the FailureTarget / SuccessCriteriaMet interim
conditions of 1.31+), ``backoff_utils.go`` (10 s doubled per failure, at most 10 min),
``pkg/controller/controller_utils.go`` (GetPodFromTemplate, the SuccessfulCreate / FailedCreate
Events) and ``pkg/controller/ttlafterfinished/ttlafterfinished_controller.go`` (processJob).
"""

from __future__ import annotations

import contextlib
import copy
from datetime import datetime
from typing import Any

from testing.fake_kube.control_plane.client import (
    LocalApi,
    condition_true,
    controlled_by,
    owner_reference,
)
from testing.fake_kube.server import FakeKubeServer
from testing.fake_kube.store import EPOCH, ApiError

JSON = dict[str, Any]
JOBS = "jobs.batch"
BACKOFF = 10  # backoff_utils.go DefaultJobPodFailureBackOff
MAX_BACKOFF = 600  # backoff_utils.go MaxJobPodFailureBackOff
DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")
BACKOFF_LIMIT = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
COMPLETED = ("CompletionsReached", "Reached expected number of succeeded pods")


def seconds(stamp: str) -> float:
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=EPOCH.tzinfo)
    return (moment - EPOCH).total_seconds()


def terminal(pod: JSON) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


class JobController:
    def __init__(self, server: FakeKubeServer) -> None:
        self.api = LocalApi(server, "job-controller")
        # uids of finished pods already counted per Job (the job-tracking finalizer's role)
        self.counted: dict[str, dict[str, str]] = {}
        self.failed_at: dict[str, list[float]] = {}
        server.store.listeners.append(self.on_change)
        server.tickers.append(self.on_tick)

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        meta = obj["metadata"]
        if key == JOBS and event != "DELETED":
            self.sync(meta["namespace"], meta["name"])
        elif key == "pods":
            for ref in meta.get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "Job":
                    self.sync(meta["namespace"], ref["name"])

    def on_tick(self) -> None:
        for job in self.api.list(JOBS, ""):
            self.sync(job["metadata"]["namespace"], job["metadata"]["name"])

    def sync(self, namespace: str, name: str) -> None:
        job = self.api.get(JOBS, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            return  # syncJob: IsJobFinished
        if job["spec"].get("suspend"):
            return
        status = job.setdefault("status", {})
        old = copy.deepcopy(status)
        uid = job["metadata"]["uid"]
        counted = self.counted.setdefault(uid, {})
        if not status.get("startTime"):
            status["startTime"] = self.api.timestamp()  # syncJob: first sync sets StartTime
        match = job["spec"]["selector"]["matchLabels"]
        pods = [
            p
            for p in self.api.list(
                "pods", namespace, ",".join(f"{k}={v}" for k, v in match.items())
            )
            if controlled_by(p, job)
        ]
        for pod in pods:
            phase = pod.get("status", {}).get("phase")
            if terminal(pod) and pod["metadata"]["uid"] not in counted:
                counted[pod["metadata"]["uid"]] = str(phase)
                if phase == "Failed":
                    self.failed_at.setdefault(uid, []).append(self.api.now)
        active = [p for p in pods if not terminal(p) and not p["metadata"].get("deletionTimestamp")]
        terminating = [
            p for p in pods if not terminal(p) and p["metadata"].get("deletionTimestamp")
        ]
        failed = sum(1 for phase in counted.values() if phase == "Failed")
        succeeded = sum(1 for phase in counted.values() if phase == "Succeeded")
        status["failed"], status["succeeded"] = failed, succeeded
        status["uncountedTerminatedPods"] = {}
        finished = self._finished_condition(job, failed, status)
        if finished is not None:
            # syncJob: FailureTarget first, active pods deleted, Failed once none terminate.
            self._set(status, "FailureTarget", *finished)
            for pod in active:
                self.api.delete("pods", namespace, pod["metadata"]["name"])
            if not active and not terminating:
                self._set(status, "Failed", *finished)
                self.api.event(job, "Warning", *finished)
            status["active"] = 0
        elif succeeded >= int(job["spec"].get("completions", 1)):
            self._set(status, "SuccessCriteriaMet", *COMPLETED)
            if not active and not terminating:
                self._set(status, "Complete", *COMPLETED)
                status["completionTime"] = self.api.timestamp()
                self.api.event(job, "Normal", "Completed", "Job completed")
            status["active"] = len(active)
        else:
            wait = self._backoff_left(uid)
            replaceable = job["spec"].get("podReplacementPolicy") != "Failed" or not terminating
            if not active and replaceable and wait <= 0:
                with contextlib.suppress(ApiError):  # FailedCreate recorded; synced again later
                    active.append(self._create_pod(job))
            status["active"] = len(active)
        status["ready"] = sum(1 for p in active if condition_true(p, "Ready"))
        if job["spec"].get("podReplacementPolicy"):
            status["terminating"] = len(terminating)
        if status != old:
            self.api.update_status(JOBS, namespace, job)

    def _finished_condition(self, job: JSON, failed: int, status: JSON) -> tuple[str, str] | None:
        target = condition_true(job, "FailureTarget")
        if target:
            return target["reason"], target["message"]
        if failed > int(job["spec"].get("backoffLimit", 6)):
            return BACKOFF_LIMIT  # exceedsBackoffLimit
        deadline = job["spec"].get("activeDeadlineSeconds")
        if deadline is not None and self.api.now - seconds(status["startTime"]) >= int(deadline):
            return DEADLINE  # pastActiveDeadline
        return None

    def _backoff_left(self, uid: str) -> float:
        """backoff_utils.go getRemainingTime: 10 s after the first failure, doubled after each."""
        failures = self.failed_at.get(uid, [])
        if not failures:
            return 0
        delay = min(BACKOFF * 2 ** (len(failures) - 1), MAX_BACKOFF)
        return failures[-1] + delay - self.api.now

    def _create_pod(self, job: JSON) -> JSON:
        """controller_utils.go GetPodFromTemplate + RealPodControl.createPods."""
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{job['metadata']['name']}-",  # getPodsPrefix
                "labels": meta.get("labels") or {},
                "ownerReferences": [owner_reference(job)],
                **({"annotations": meta["annotations"]} if meta.get("annotations") else {}),
            },
            "spec": template["spec"],
        }
        try:
            created = self.api.create("pods", job["metadata"]["namespace"], pod)
        except ApiError as err:
            self.api.event(job, "Warning", "FailedCreate", f"Error creating: {err.message}")
            raise
        self.api.event(
            job, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
        )
        return created

    def _set(self, status: JSON, kind: str, reason: str, message: str) -> None:
        conditions = status.setdefault("conditions", [])
        if any(c["type"] == kind for c in conditions):
            return
        now = self.api.timestamp()
        conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
        )


class TtlController:
    """ttlafterfinished_controller.go: a finished Job with ``ttlSecondsAfterFinished`` is deleted
    (propagation Foreground) once that long has passed since it finished."""

    def __init__(self, server: FakeKubeServer) -> None:
        self.api = LocalApi(server, "ttl-after-finished-controller")
        server.store.listeners.append(self.on_change)
        server.tickers.append(self.on_tick)

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        if key == JOBS and event != "DELETED":
            self.process(obj)

    def on_tick(self) -> None:
        for job in self.api.list(JOBS, ""):
            self.process(job)

    def process(self, job: JSON) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        finished = condition_true(job, "Complete") or condition_true(job, "Failed")
        if ttl is None or not finished or job["metadata"].get("deletionTimestamp"):
            return
        # jobFinishTime: the finished condition's lastTransitionTime.
        if self.api.now >= seconds(finished["lastTransitionTime"]) + int(ttl):
            meta = job["metadata"]
            self.api.delete(JOBS, meta["namespace"], meta["name"], propagation="Foreground")
