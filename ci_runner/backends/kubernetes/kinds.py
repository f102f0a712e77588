"""Which :class:`~ci_runner.backends.kubernetes.jobkind.JobKind` a job is: from the rendered
object's ``kind`` (``MPIJob``: :mod:`mpijob`; ``Job``: :mod:`indexed_job`), or from train.yaml's
``distributed`` where nothing is rendered (``ci-runner cancel``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from ci_runner.backends.kubernetes.indexed_job import IndexedJobKind
from ci_runner.backends.kubernetes.jobkind import JobKind
from ci_runner.backends.kubernetes.mpijob import MpiJobKind

MPIJOB: Final = "MPIJob"
JOB: Final = "Job"
# train.yaml's ``distributed`` -> the kind of object it renders.
KIND_OF_DISTRIBUTED: Final = {"horovod": MPIJOB, "torchrun": JOB}


def job_kind(
    kind: str,
    name: str,
    container: str | None = None,
    *,
    ranks_per_node: int = 0,
    code_dir: str = "",
) -> JobKind:
    """The job kind of an object of ``kind`` named ``name``; ``container``: the followed
    container (each kind's own unless given); a Job's ``ranks_per_node`` and ``code_dir``
    (:class:`IndexedJobKind`'s, for its failing rank)."""
    if kind == MPIJOB:
        return MpiJobKind(name) if container is None else MpiJobKind(name, container)
    if kind == JOB:
        job = IndexedJobKind(name, ranks_per_node=ranks_per_node, code_dir=code_dir)
        return job if container is None else replace(job, followed_container=container)
    raise ValueError(f"no job kind for a {kind!r}: ci-runner runs an MPIJob or a batch/v1 Job")


def followed_container(manifest: Mapping[str, Any]) -> str:
    """The container whose log and exit code are the job's: the MPIJob launcher's, or the Job's
    pod template's first (torchrun's)."""
    spec = manifest["spec"]
    if manifest.get("kind") == JOB:
        pod = spec["template"]["spec"]
    else:
        pod = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return str(pod["containers"][0]["name"])
