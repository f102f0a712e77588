"""Kueue v0.17.0's objects for tests (kueue.x-k8s.io/v1beta2, its storage version): a
ResourceFlavor, a ClusterQueue with cpu and memory quota, a LocalQueue, a WorkloadPriorityClass,
each created and deleted with :class:`KueueObjects`; and a job's Workload, which Kueue labels with
the job's UID (``kueue.x-k8s.io/job-uid``, ``pkg/controller/constants/constants.go``)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from testing.kube_api import Api, ApiFailure
from testing.waiting import wait_for

JSON = dict[str, Any]
GROUP = "kueue.x-k8s.io"
VERSION = f"{GROUP}/v1beta2"
API = f"/apis/{VERSION}"
# The labels a job carries for Kueue (pkg/controller/constants/constants.go).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def workloads_path(namespace: str) -> str:
    return f"{API}/namespaces/{namespace}/workloads"


class KueueObjects:
    """What a test creates of Kueue's, deleted (newest first) by :meth:`delete_all`:
    ``with KueueObjects(api) as kueue:``."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.created: list[str] = []

    def __enter__(self) -> KueueObjects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete_all()

    def _create(self, collection: str, obj: JSON) -> JSON:
        answer = self.api.create(collection, obj)
        assert answer is not None, f"{collection} is not served"
        self.created.append(f"{collection}/{obj['metadata']['name']}")
        return answer

    def delete(self, path: str) -> None:
        """One object, gone already or not."""
        with contextlib.suppress(ApiFailure):
            self.api.delete(path)
        if path in self.created:
            self.created.remove(path)

    def delete_all(self) -> None:
        for path in reversed(list(self.created)):
            self.delete(path)

    def resource_flavor(self, name: str) -> JSON:
        body = {"apiVersion": VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}}
        return self._create(f"{API}/resourceflavors", body)

    def cluster_queue(
        self,
        name: str,
        flavor: str,
        quota: Mapping[str, str],
        within_cluster_queue: str = "LowerPriority",
    ) -> JSON:
        """A ClusterQueue for every namespace with ``quota`` (resource -> nominal quota, e.g.
        cpu, memory, ephemeral-storage: Kueue refuses a pod that asks for a resource it does not
        cover) of ``flavor``, preempting lower-priority Workloads of its own
        (``preemption.withinClusterQueue``)."""
        resources = [{"name": key, "nominalQuota": value} for key, value in quota.items()]
        group = {
            "coveredResources": list(quota),
            "flavors": [{"name": flavor, "resources": resources}],
        }
        body = {
            "apiVersion": VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": within_cluster_queue},
                "resourceGroups": [group],
            },
        }
        return self._create(f"{API}/clusterqueues", body)

    def local_queue(self, namespace: str, name: str, cluster_queue: str) -> JSON:
        body = {
            "apiVersion": VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        }
        return self._create(f"{API}/namespaces/{namespace}/localqueues", body)

    def workload_priority_class(self, name: str, value: int) -> JSON:
        body = {
            "apiVersion": VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        return self._create(f"{API}/workloadpriorityclasses", body)


def job_workload(api: Api, namespace: str, job_uid: str) -> JSON | None:
    """The Workload Kueue made for the job of UID ``job_uid``, None while there is none."""
    items, _ = api.list(workloads_path(namespace), {"labelSelector": f"{JOB_UID_LABEL}={job_uid}"})
    return items[0] if items else None


def wait_workload(api: Api, namespace: str, job_uid: str, timeout: float = 30.0) -> JSON:
    return wait_for(
        f"the Workload of job {job_uid}", lambda: job_workload(api, namespace, job_uid), timeout
    )


def condition(workload: JSON, kind: str) -> JSON | None:
    """The Workload's (or LocalQueue's...) condition of type ``kind``, None if absent."""
    for found in (workload.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def wait_condition(
    api: Api, namespace: str, job_uid: str, kind: str, status: str, timeout: float = 30.0
) -> JSON:
    """The job's Workload once its condition ``kind`` has ``status`` ("True", "False")."""

    def probe() -> JSON | None:
        workload = job_workload(api, namespace, job_uid)
        found = condition(workload, kind) if workload is not None else None
        return workload if found is not None and found.get("status") == status else None

    return wait_for(f"{kind}={status} on the Workload of job {job_uid}", probe, timeout)


def pending_workload(api: Api, namespace: str, job_uid: str, local_queue: str = "team-a") -> JSON:
    """The Workload Kueue would make for the job of ``job_uid`` and leave without quota, for a
    scripted cluster that has Kueue's CRDs but not Kueue: its job-uid label and a QuotaReserved
    False condition in Kueue's words."""
    name = f"scripted-{job_uid[:8]}"
    body = {
        "apiVersion": VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "labels": {JOB_UID_LABEL: job_uid}},
        "spec": {
            "queueName": local_queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
                }
            ],
        },
    }
    created = api.create(workloads_path(namespace), body)
    assert created is not None
    path = f"{workloads_path(namespace)}/{name}/status"
    pending = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu "
        "in flavor default-flavor, 1 more needed",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    updated = api.merge_patch(path, {"status": {"conditions": [pending]}})
    assert updated is not None
    return updated
