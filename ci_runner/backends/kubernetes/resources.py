"""The Kubernetes resources ci-runner touches, and the URL paths that name them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, TypeAlias

# A Kubernetes object (or any JSON object) as the API server sends it.
JSON: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """A namespaced API resource: group ("" for core), version, plural name, kind."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def label(self) -> str:
        """How error messages name it: ``pods/log``, ``mpijobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str | None = None) -> str:
        """The collection path, or the object path when ``name`` is given."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        collection, _, subresource = self.plural.partition("/")
        path = f"{root}/namespaces/{namespace}/{collection}"
        if name is not None:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path


MPIJOBS: Final = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
PODS: Final = Resource("", "v1", "pods", "Pod")
POD_LOGS: Final = Resource("", "v1", "pods/log", "Pod")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS: Final = Resource("", "v1", "events", "Event")
# distributed: torchrun's job is a batch/v1 Indexed Job with a headless Service.
JOBS: Final = Resource("batch", "v1", "jobs", "Job")
SERVICES: Final = Resource("", "v1", "services", "Service")
# Kueue (kubernetes.local_queue): the LocalQueue a job waits in, and the Workload Kueue makes of
# the job (sigs.k8s.io/kueue v0.17.0 serves kueue.x-k8s.io v1beta2, its storage version).
LOCALQUEUES: Final = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
WORKLOADS: Final = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
# Kueue's visibility API (an aggregated API, served by Kueue through kube-apiserver): the
# LocalQueue's pending Workloads with their positions (apis/visibility/v1beta2/types.go).
PENDING_WORKLOADS: Final = Resource(
    "visibility.kueue.x-k8s.io",
    "v1beta2",
    "localqueues/pendingworkloads",
    "PendingWorkloadsSummary",
)

# Every MPIJob ci-runner renders carries this label (render.py).
MANAGED_BY_CI_RUNNER: Final = "app.kubernetes.io/managed-by=ci-runner"
# When any later run (or cancel) in the namespace may delete the MPIJob (RFC 3339 UTC): stamped
# at submission with the latest its pods can run, and at the end with the end of keep_finished.
DELETE_AFTER: Final = "ci-runner/delete-after"
_STAMP_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"


def delete_after_stamp(until: datetime) -> str:
    """``until`` as the value of :data:`DELETE_AFTER`."""
    return until.astimezone(timezone.utc).strftime(_STAMP_FORMAT)


def delete_after(mpijob: JSON) -> datetime | None:
    """The time in ``mpijob``'s :data:`DELETE_AFTER` annotation; None without a readable one."""
    stamp = (mpijob.get("metadata", {}).get("annotations") or {}).get(DELETE_AFTER)
    try:
        return datetime.strptime(str(stamp), _STAMP_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


# MPI Operator v0.8.2 pod labels (pkg/apis/kubeflow/v2beta1/constants.go in kubeflow/mpi-operator).
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"


def job_selector(mpijob_name: str, role: str | None = None) -> str:
    """The label selector for a job's pods (optionally one role: launcher or worker)."""
    selector = f"{JOB_NAME_LABEL}={mpijob_name}"
    return f"{selector},{JOB_ROLE_LABEL}={role}" if role else selector


# The Job controller's pod labels (k8s.io/api v0.35.4 batch/v1/types.go: JobNameLabel, and
# JobCompletionIndexAnnotation, also a label since PodIndexLabel, GA in v1.32; set by
# pkg/controller/job/indexed_job_utils.go addCompletionIndexLabel).
BATCH_JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


def batch_job_selector(job_name: str) -> str:
    """The label selector for the pods of batch/v1 Job ``job_name``."""
    return f"{BATCH_JOB_NAME_LABEL}={job_name}"
