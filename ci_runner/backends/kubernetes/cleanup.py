"""Delete a job and everything it owns. Idempotent: what is already gone is fine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import NotFound
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
from ci_runner.clock import Clock


def cancel_on_cluster(
    client: ApiClient, namespace: str, mpijob_name: str, secret_name: str, clock: Clock
) -> list[str]:
    """``ci-runner cancel``: delete the job and all it owns, and the jobs of the namespace whose
    time has passed (:func:`delete_expired`, their names); :class:`ClusterError` if refused."""
    api = KubeApi(client, namespace, clock)
    cancel_job(api, mpijob_name, secret_name)
    return delete_expired(api, clock.now(), spare=mpijob_name)


def cancel_job(api: KubeApi, mpijob_name: str, secret_name: str) -> None:
    """Delete the MPIJob (its pods, launcher Job, Service... go with it), its pods, its Secret."""
    _delete(api, MPIJOBS, [mpijob_name], propagation="Foreground")
    # The garbage collector removes the rest in its own time; pods must stop now: one request
    # for all of them (256 workers are 256 DELETEs otherwise).
    api.delete_collection(PODS, job_selector(mpijob_name), propagation="Background")
    _delete(api, SECRETS, [secret_name])


def remove_finished_job(api: KubeApi, mpijob_name: str, secret_name: str) -> None:
    """Delete a finished MPIJob: the garbage collector removes what it owns (launcher Job, pods,
    Service, ConfigMap, the Secret); the Secret is deleted here too, so its token goes at once."""
    _delete(api, MPIJOBS, [mpijob_name], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def keep_until(api: KubeApi, mpijob_name: str, until: datetime) -> str:
    """Mark a finished MPIJob to be deleted by the first run after ``until``; the stamp."""
    stamp = delete_after_stamp(until)
    api.patch(MPIJOBS, mpijob_name, {"metadata": {"annotations": {DELETE_AFTER: stamp}}})
    return stamp


def delete_expired(api: KubeApi, now: datetime, spare: str | None = None) -> list[str]:
    """Delete ci-runner's MPIJobs whose ``ci-runner/delete-after`` time has passed: kept ones
    whose keeping ended, and those a killed CI job left (stamped at submission with the latest
    their pods can run); their names. ``spare``: a name not to delete (the job being run)."""
    listing = api.list(MPIJOBS, label_selector=MANAGED_BY_CI_RUNNER)
    expired = []
    for job in listing.get("items", []):
        until = delete_after(job)
        name = str(job["metadata"]["name"])
        if until is not None and until <= now and name != spare:
            expired.append(name)
    _delete(api, MPIJOBS, expired, propagation="Background")
    return expired


def expired_line(name: str) -> str:
    """The status line for a job :func:`delete_expired` deleted."""
    return (
        f"deleted MPIJob {name}: its time (ci-runner/delete-after) had passed; an earlier run "
        "kept it, or was stopped before it could delete it"
    )


def delete_workers(api: KubeApi, mpijob_name: str) -> None:
    """Delete the job's worker pods (those already gone or ended included) in one request."""
    workers = job_selector(mpijob_name, Role.WORKER.value)
    api.delete_collection(PODS, workers, propagation="Background")


def _delete(
    api: KubeApi, resource: Resource, names: Iterable[str], propagation: str | None = None
) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            api.delete(resource, name, propagation)
