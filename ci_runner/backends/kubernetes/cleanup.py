"""Delete a job and everything it owns. Idempotent: what is already gone is fine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime, timezone

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import NotFound
from ci_runner.backends.kubernetes.resources import (
    DELETE_AFTER,
    MANAGED_BY_CI_RUNNER,
    MPIJOBS,
    PODS,
    SECRETS,
    Resource,
    job_selector,
)
from ci_runner.clock import Clock


def cancel_on_cluster(
    client: ApiClient, namespace: str, mpijob_name: str, secret_name: str, clock: Clock
) -> None:
    """``ci-runner cancel``: delete the job and all it owns; :class:`ClusterError` if refused."""
    cancel_job(KubeApi(client, namespace, clock), mpijob_name, secret_name)


def cancel_job(api: KubeApi, mpijob_name: str, secret_name: str) -> None:
    """Delete the MPIJob (its pods, launcher Job, Service... go with it), its pods, its Secret."""
    _delete(api, MPIJOBS, [mpijob_name], propagation="Foreground")
    # The garbage collector removes the rest in its own time; pods must stop now.
    pods = api.list(PODS, label_selector=job_selector(mpijob_name)).get("items", [])
    _delete(api, PODS, [p["metadata"]["name"] for p in pods], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def remove_finished_job(api: KubeApi, mpijob_name: str, secret_name: str) -> None:
    """Delete a finished MPIJob: the garbage collector removes what it owns (launcher Job, pods,
    Service, ConfigMap, the Secret); the Secret is deleted here too, so its token goes at once."""
    _delete(api, MPIJOBS, [mpijob_name], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def keep_until(api: KubeApi, mpijob_name: str, until: datetime) -> str:
    """Mark a finished MPIJob to be deleted by the first run after ``until``; the stamp."""
    stamp = until.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.patch(MPIJOBS, mpijob_name, {"metadata": {"annotations": {DELETE_AFTER: stamp}}})
    return stamp


def delete_expired(api: KubeApi, now: datetime) -> list[str]:
    """Delete the kept MPIJobs whose keeping has ended (those ci-runner marked); their names."""
    listing = api.list(MPIJOBS, label_selector=MANAGED_BY_CI_RUNNER)
    expired = []
    for job in listing.get("items", []):
        stamp = (job.get("metadata", {}).get("annotations") or {}).get(DELETE_AFTER)
        try:
            until = datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            continue  # not kept, or not by us
        if until <= now:
            expired.append(str(job["metadata"]["name"]))
    _delete(api, MPIJOBS, expired, propagation="Background")
    return expired


def delete_pods(api: KubeApi, names: Iterable[str]) -> None:
    """Delete these pods, those already gone included."""
    _delete(api, PODS, names, propagation="Background")


def _delete(
    api: KubeApi, resource: Resource, names: Iterable[str], propagation: str | None = None
) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            api.delete(resource, name, propagation)
