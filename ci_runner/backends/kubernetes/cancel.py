"""Delete a job and everything it owns. Idempotent: what is already gone is fine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import NotFound
from ci_runner.backends.kubernetes.resources import (
    MPIJOBS,
    PODS,
    SECRETS,
    Resource,
    job_selector,
)
from ci_runner.clock import Clock


def cancel_on_cluster(
    client: ApiClient, namespace: str, job_name: str, secret_name: str, clock: Clock
) -> None:
    """``ci-runner cancel``: delete the job and all it owns; :class:`ClusterError` if refused."""
    cancel_job(KubeApi(client, namespace, clock), job_name, secret_name)


def cancel_job(api: KubeApi, job_name: str, secret_name: str) -> None:
    """Delete the MPIJob (its pods, launcher Job, Service... go with it), its pods, its Secret."""
    _delete(api, MPIJOBS, [job_name], propagation="Foreground")
    # The garbage collector removes the rest in its own time; pods must stop now.
    pods = api.list(PODS, label_selector=job_selector(job_name)).get("items", [])
    _delete(api, PODS, [p["metadata"]["name"] for p in pods], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def remove_finished_job(api: KubeApi, job_name: str, secret_name: str) -> None:
    """Delete a finished MPIJob: the garbage collector removes what it owns (launcher Job, pods,
    Service, ConfigMap, the Secret); the Secret is deleted here too, so its token goes at once."""
    _delete(api, MPIJOBS, [job_name], propagation="Background")
    _delete(api, SECRETS, [secret_name])


def delete_pods(api: KubeApi, names: Iterable[str]) -> None:
    """Delete these pods, those already gone included."""
    _delete(api, PODS, names, propagation="Background")


def _delete(
    api: KubeApi, resource: Resource, names: Iterable[str], propagation: str | None = None
) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            api.delete(resource, name, propagation)
