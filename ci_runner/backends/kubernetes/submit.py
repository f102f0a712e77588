"""Create the job object (an MPIJob, or a batch/v1 Job and then its headless Service), then its
Secret and the ConfigMap of its pod scripts, each owned by the job object from its creation.

The Secret (the git credential, train.yaml's ``secrets``) is never without an owner: whatever ends
ci-runner (a SIGKILL included), the garbage collector deletes it with its job, which is
stamped with the time any later run may delete it. The pods wait for it: a Secret volume that is
not there yet is a mount the kubelet retries, and the containers that read it as variables start
after the init container that mounts it.

A restarted CI job re-submits the same job name: we attach to the job already there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Conflict, KubeError
from ci_runner.backends.kubernetes.resources import (
    CONFIGMAPS,
    DELETE_AFTER,
    JOBS,
    JSON,
    MPIJOBS,
    SECRETS,
    SERVICES,
    Resource,
    delete_after_stamp,
)
from ci_runner.plan.run_plan import JobSecret


@dataclass(frozen=True)
class Submission:
    mpijob: JSON  # the job object (an MPIJob or a Job) as the API server returned it
    attached: bool  # True when the job already existed

    @property
    def name(self) -> str:
        return str(self.mpijob["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.mpijob["metadata"]["uid"])


def submit(
    api: KubeApi,
    manifest: JSON,
    secret: JobSecret,
    delete_after: datetime | None = None,
    scripts: JSON | None = None,
    service: JSON | None = None,
) -> Submission:
    """Submit ``manifest`` with its Secret, or attach to the job of that name already running.

    ``delete_after``: when any later run in the namespace may delete the job (stamped on it as
    ``ci-runner/delete-after``), in case this CI job is killed before it cleans up. ``scripts``:
    the ConfigMap of the pod scripts (render_scripts), which the pods mount. ``service``: a
    batch/v1 Job's headless Service (its nodes' names), created right after the Job.
    """
    mpijob_name = str(manifest["metadata"]["name"])
    resource = job_resource(manifest)
    if delete_after is not None:
        metadata = dict(manifest["metadata"])
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            DELETE_AFTER: delete_after_stamp(delete_after),
        }
        manifest = {**manifest, "metadata": metadata}
    try:
        mpijob = api.create(resource, manifest)
        attached = False
    except Conflict:
        mpijob = api.get(resource, mpijob_name)
        attached = True
    owner = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "name": mpijob_name,
        "uid": mpijob["metadata"]["uid"],
    }
    try:
        if service is not None:
            _put_owned(api, SERVICES, service, owner, {})
        _put_secret(api, secret.name, manifest, secret.values(), owner)
        if scripts is not None:
            _put_scripts(api, scripts, owner)
    except KubeError:
        if not attached:
            # Its pods would wait for the Secret until their deadline: the job goes now.
            with contextlib.suppress(KubeError):
                api.delete(resource, mpijob_name, "Background")
        raise
    return Submission(mpijob, attached)


def _put_secret(
    api: KubeApi, name: str, manifest: JSON, data: Mapping[str, str], owner: JSON
) -> None:
    labels = dict(manifest["metadata"].get("labels") or {})
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "type": "Opaque",
        "stringData": dict(data),
    }
    try:
        api.create(SECRETS, body)
    except Conflict:
        # Left by an earlier run of this CI job: give it this run's values and owner.
        api.patch(
            SECRETS, name, {"metadata": {"ownerReferences": [owner]}, "stringData": dict(data)}
        )


def _put_scripts(api: KubeApi, scripts: JSON, owner: JSON) -> None:
    _put_owned(api, CONFIGMAPS, scripts, owner, {"data": scripts["data"]})


def _put_owned(api: KubeApi, resource: Resource, body: JSON, owner: JSON, again: JSON) -> None:
    """Create ``body`` owned by ``owner``; one left by an earlier run of this CI job (the same
    name) gets this run's owner (and ``again``: this run's data)."""
    metadata = {**body["metadata"], "ownerReferences": [owner]}
    metadata.pop("namespace", None)  # the API's namespace
    try:
        api.create(resource, {**body, "metadata": metadata})
    except Conflict:
        patch = {"metadata": {"ownerReferences": [owner]}, **again}
        api.patch(resource, str(metadata["name"]), patch)


def job_resource(manifest: JSON) -> Resource:
    """The resource of a rendered job object: a batch/v1 Job's, else the MPIJob's."""
    return JOBS if manifest.get("kind") == JOBS.kind else MPIJOBS
