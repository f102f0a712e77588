"""kubernetes.local_queue, checked before anything is submitted: Kueue keeps a job whose
LocalQueue does not exist, or admits nothing, pending for ever, so such a run ends at once.

Without the RBAC right to read the LocalQueue or the job's Workload, ci-runner says so once and
goes on: the job still waits in its queue, only the CI log cannot say why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from ci_runner import kueue_names
from ci_runner.backends.kubernetes import kueue
from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Forbidden, NotFound
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.backends.kubernetes.resources import LOCALQUEUES, WORKLOADS
from ci_runner.config.types import TrainConfig
from ci_runner.errors import ConfigError, Problem

YAML_PATH: Final = "kubernetes.local_queue"


def check_local_queue(
    api: KubeApi, config: TrainConfig, warn: Callable[[str], None]
) -> QueueInfo | None:
    """The job's LocalQueue as the cluster has it (None without kubernetes.local_queue).

    Raises :class:`~ci_runner.errors.ConfigError` when Kueue is not installed, or the LocalQueue
    does not exist or admits nothing; ``warn``s once when RBAC hides it."""
    k8s = config.kubernetes
    if k8s.local_queue is None:
        return None
    info = QueueInfo(k8s.local_queue, timeout=k8s.queue_timeout)
    try:
        local_queue = api.get(LOCALQUEUES, k8s.local_queue)
        # The Workload is read by the job's uid; none has it yet: this only asks for the right.
        api.list(WORKLOADS, label_selector=f"{kueue_names.JOB_UID_LABEL}=none")
    except Forbidden:
        warn(kueue.not_visible_line(info, api.namespace))
        return replace(info, visible=False)
    except NotFound as err:
        raise ConfigError([_missing(config, api.namespace, err)]) from None
    problem = kueue.local_queue_problem(local_queue)
    if problem is not None:
        fix = (
            "ask the cluster's admin to start it, or name another LocalQueue of the namespace "
            "(kubectl get localqueues lists them)"
        )
        raise ConfigError([_problem(config, f"{problem}: Kueue would keep the job pending", fix)])
    return replace(info, cluster_queue=kueue.cluster_queue_of(local_queue))


def _missing(config: TrainConfig, namespace: str, err: NotFound) -> Problem:
    name = config.kubernetes.local_queue
    if f'"{name}" not found' not in err.message:
        # The resource itself is unknown: the API server serves no Kueue.
        return _problem(
            config,
            f"names a Kueue LocalQueue, but the cluster serves no {LOCALQUEUES.label} "
            f"({LOCALQUEUES.api_version}): Kueue v0.15 or later is not installed",
            "install Kueue on the cluster, or remove kubernetes.local_queue",
        )
    return _problem(
        config,
        f"LocalQueue {name} does not exist in namespace {namespace}: Kueue would keep the job "
        "pending for ever",
        "name a LocalQueue of the namespace (kubectl get localqueues lists them), or ask the "
        "cluster's admin to create this one",
    )


def _problem(config: TrainConfig, message: str, fix: str) -> Problem:
    return Problem(config.source_file, YAML_PATH, config.lines.get(YAML_PATH), message, fix)
