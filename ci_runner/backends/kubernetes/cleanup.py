"""Delete a job and everything it owns. Idempotent: what is already gone is fine.

Each kind's object is its own resource (an MPIJob; a batch/v1 Job, whose Service, ConfigMap and
Secret it owns): the functions take it, the MPIJob's unless told, and each kind reaps its own
expired jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import NotFound
from ci_runner.backends.kubernetes.kinds import MPIJOB, job_kind
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import (
    DELETE_AFTER,
    MANAGED_BY_CI_RUNNER,
    MPIJOBS,
    PODS,
    SECRETS,
    Resource,
    delete_after,
    delete_after_stamp,
    job_selector,
)
from ci_runner.backends.kubernetes.traits import traits_of
from ci_runner.clock import Clock


def cancel_on_cluster(
    client: ApiClient,
    namespace: str,
    mpijob_name: str,
    secret_name: str,
    clock: Clock,
    kind: str = MPIJOB,
) -> list[str]:
    """``ci-runner cancel``: delete the job (an object of ``kind``, :mod:`kinds`) and all it
    owns, and the namespace's jobs of that kind whose time has passed (:func:`delete_expired`,
    their names); :class:`ClusterError` if refused."""
    api = KubeApi(client, namespace, clock)
    job = job_kind(kind, mpijob_name)
    cancel_job(api, mpijob_name, secret_name, job.resource, traits_of(job).pod_selector)
    return delete_expired(api, clock.now(), spare=mpijob_name, resource=job.resource)


def cancel_job(
    api: KubeApi,
    mpijob_name: str,
    secret_name: str,
    resource: Resource = MPIJOBS,
    pods: str | None = None,
) -> None:
    """Delete the job object (an MPIJob's pods, launcher Job, Service...; a Job's pods, Service
    and ConfigMap go with it), its pods (``pods``: their selector, the MPIJob's unless given),
    its Secret."""
    _delete(api, resource, [mpijob_name], propagation="Foreground")
    # The garbage collector removes the rest in its own time; pods must stop now: one request
    # for all of them (256 workers are 256 DELETEs otherwise).
    api.delete_collection(PODS, pods or job_selector(mpijob_name), propagation="Background")
    _delete(api, SECRETS, [secret_name])


def remove_finished_job(
    api: KubeApi, mpijob_name: str, secret_name: str, resource: Resource = MPIJOBS
) -> None:
    """Delete a finished job: the garbage collector removes what it owns (an MPIJob's launcher
    Job, pods, Service, ConfigMap, the Secret; a Job's pods, Service, ConfigMap, the Secret); the
    Secret is deleted here too, so its token goes at once."""
    _delete(api, resource, [mpijob_name], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def keep_until(
    api: KubeApi, mpijob_name: str, until: datetime, resource: Resource = MPIJOBS
) -> str:
    """Mark a finished job to be deleted by the first run after ``until``; the stamp."""
    stamp = delete_after_stamp(until)
    api.patch(resource, mpijob_name, {"metadata": {"annotations": {DELETE_AFTER: stamp}}})
    return stamp


def delete_expired(
    api: KubeApi, now: datetime, spare: str | None = None, resource: Resource = MPIJOBS
) -> list[str]:
    """Delete ci-runner's jobs of ``resource`` whose ``ci-runner/delete-after`` time has passed:
    kept ones whose keeping ended, and those a killed CI job left (stamped at submission with
    the latest their pods can run); their names. ``spare``: a name not to delete (the job being
    run)."""
    listing = api.list(resource, label_selector=MANAGED_BY_CI_RUNNER)
    expired = []
    for job in listing.get("items", []):
        until = delete_after(job)
        name = str(job["metadata"]["name"])
        if until is not None and until <= now and name != spare:
            expired.append(name)
    _delete(api, resource, expired, propagation="Background")
    return expired


def expired_line(name: str, noun: str = MPIJOB) -> str:
    """The status line for a job :func:`delete_expired` deleted (``noun``: its kind)."""
    return (
        f"deleted {noun} {name}: its time (ci-runner/delete-after) had passed; an earlier run "
        "kept it, or was stopped before it could delete it"
    )


def delete_workers(api: KubeApi, mpijob_name: str, selector: str | None = None) -> None:
    """Delete the job's worker pods (those already gone or ended included) in one request
    (``selector``: theirs, the MPIJob's workers' unless given)."""
    workers = selector or job_selector(mpijob_name, Role.WORKER.value)
    api.delete_collection(PODS, workers, propagation="Background")


def _delete(
    api: KubeApi, resource: Resource, names: Iterable[str], propagation: str | None = None
) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            api.delete(resource, name, propagation)
