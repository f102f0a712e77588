"""The validated ``train.yaml``: plain frozen dataclasses every later step consumes.

``ci_runner.config.schema.load_config`` turns YAML text into these (or a
:class:`~ci_runner.errors.ConfigError`); nothing else constructs them from user input. Tests may
construct them directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from ci_runner.config.quantity import binary_quantity, quantity_value

Goal = Literal["min", "max"]
Operator = Literal["Exists", "Equal"]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
PvcAccessMode = Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"]
TrackingServer = Literal["mlflow", "gitlab", "off"]
OnPreemption = Literal["wait", "fail"]
# How the ranks start: Horovod's mpirun from an MPIJob's launcher, or torchrun in every pod of an
# Indexed Job.
Distributed = Literal["horovod", "torchrun"]
DISTRIBUTED_KINDS: Final[tuple[Distributed, ...]] = ("horovod", "torchrun")
# What each kind of job is called in what ci-runner says (validate, render, the MR comment).
JOB_KINDS: Final[Mapping[Distributed, str]] = MappingProxyType(
    {"horovod": "MPIJob", "torchrun": "Indexed Job"}
)


@dataclass(frozen=True)
class ContainerResources:
    """What one of our own containers requests and is limited to (the same amount for both);
    None: not set, so the namespace's LimitRange defaults apply."""

    cpu: str | None = None
    memory: str | None = None


# A namespace whose ResourceQuota tracks cpu or memory refuses a pod unless every container,
# init containers included, declares them (pkg/quota/v1/evaluator/core/pods.go, Constraints).
# Enough for git and pip (pip unpacks a torch wheel in about 1 GiB) and for horovodrun's mpirun
# and its ssh clients.
SETUP_RESOURCES: Final = ContainerResources(cpu="1", memory="2Gi")
LAUNCHER_RESOURCES: Final = ContainerResources(cpu="500m", memory="1Gi")
# /dev/shm's default size (a memory-backed emptyDir, whose pages count against the worker's
# memory limit): half of the worker's memory, at most SHM_MAX; SHM_WITHOUT_MEMORY when train.yaml
# sets no memory (the namespace's LimitRange then decides the limit).
# The uid ci-runner's own containers run as when train.yaml names none: Debian's and Ubuntu's
# `nobody`, a user in every image built on them (ssh refuses a uid without a passwd entry).
NOBODY_UID: Final = 65534
# The first port a non-root sshd may bind (no capability: allowPrivilegeEscalation false).
UNPRIVILEGED_PORT: Final = 1024
# What each worker may write to its disk (ephemeral-storage: the checkout, the requirements'
# virtualenv and pip's cache in their emptyDirs, and the container's own writes): a torch
# virtualenv and its wheel in pip's cache take about 8 GiB.
DISK: Final = "20Gi"
# The launcher's: mpirun's session files (and an elastic job's checkout).
LAUNCHER_DISK: Final = "2Gi"
SHM_MAX: Final = "16Gi"
SHM_WITHOUT_MEMORY: Final = "1Gi"
_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Resources:
    """Per-worker resources; ``gpu`` is ``nvidia.com/gpu``, cpu/memory are Kubernetes quantities.
    ``setup`` is every init container's (fetch-code, install-requirements), ``launcher`` the
    launcher container's."""

    gpu: int = 0
    cpu: str | None = None
    memory: str | None = None
    setup: ContainerResources = SETUP_RESOURCES
    launcher: ContainerResources = LAUNCHER_RESOURCES
    shm: str | None = None  # None: shm_size's default
    disk: str = DISK

    @property
    def shm_size(self) -> str:
        """/dev/shm's sizeLimit: ``shm``, else half of ``memory`` (whole MiB) at most
        :data:`SHM_MAX`, else :data:`SHM_WITHOUT_MEMORY`."""
        if self.shm is not None:
            return self.shm
        if self.memory is None:
            return SHM_WITHOUT_MEMORY
        half = int(quantity_value(self.memory) / 2) // _MIB * _MIB
        return binary_quantity(max(min(half, int(quantity_value(SHM_MAX))), _MIB))


@dataclass(frozen=True)
class MetricSpec:
    """A metric parsed from the training log.

    ``pattern`` has a named group ``value`` and optionally ``step`` and ``rank``; it is matched
    against each log line with horovodrun's ``[rank]<stdout>:`` prefix removed.
    """

    name: str
    pattern: re.Pattern[str]
    goal: Goal = "min"


@dataclass(frozen=True)
class Elastic:
    """Elastic Horovod: the job keeps running with between min and max workers."""

    min_workers: int
    max_workers: int


@dataclass(frozen=True)
class TrackingSpec:
    """Where and what to log as an MLflow run (``ci_runner.tracking``): ``mlflow`` is the server
    ``MLFLOW_TRACKING_URI`` names, ``gitlab`` the project's model experiments."""

    server: TrackingServer = "mlflow"
    experiment: str | None = None  # None: train.yaml's name
    per_rank: bool = False  # also each rank's values, as <metric>/rank_<n>
    model: str | None = None  # a model version of this name on the default branch
    # The ranks log to the run themselves, with a token of their own (ci_runner.tracking.target).
    ranks_log: bool = False
    ranks_log_line: int | None = field(default=None, compare=False)  # for the error naming it


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: Operator = "Equal"
    value: str | None = None
    effect: Effect | None = None
    toleration_seconds: int | None = None


@dataclass(frozen=True)
class DnsConfig:
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[tuple[str, str | None], ...] = ()  # (name, value) pairs


@dataclass(frozen=True)
class LauncherPlacement:
    """Where the launcher pod may run: none of the workers' GPU selectors or tolerations."""

    node_selector: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    tolerations: tuple[Toleration, ...] = ()
    affinity: str | None = None  # the pod's affinity, as JSON text


@dataclass(frozen=True)
class KubernetesOptions:
    """Cluster-specific settings; all optional."""

    context: str | None = None  # kubeconfig context; KUBE_CONTEXT and --kube-context override it
    namespace: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    dns_config: DnsConfig | None = None
    service_account: str | None = None
    priority_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    queue: str | None = None  # gang scheduling (Volcano / scheduler-plugins) queue name
    local_queue: str | None = None  # Kueue's LocalQueue: the job is labelled and created suspended
    workload_priority_class: str | None = None  # Kueue's WorkloadPriorityClass (with local_queue)
    queue_timeout: int | None = None  # seconds queued in local_queue before the job fails
    pip_cache_pvc: str | None = None  # PVC for pip's cache; an emptyDir when None
    pip_cache_access_mode: PvcAccessMode = "ReadWriteOnce"  # only ReadWriteMany is shared
    cluster_domain: str = "cluster.local"  # the DNS search domains when dnsPolicy is None
    ssh_port: int = 22  # the port the workers' sshd listens on
    run_as_user: int | None = None  # the image's non-root uid; None: the workers run as root
    launcher: LauncherPlacement = LauncherPlacement()
    ttl_seconds_after_finished: int = 3600
    backoff_limit: int = 0
    keep_finished: int = 0  # seconds a finished MPIJob is kept; 0: deleted once its log is saved
    setup_timeout: int = 1800  # seconds for image pulls, code fetch and pip before the launcher
    unschedulable_timeout: int = 600  # seconds pods may stay unschedulable before we fail the job
    on_preemption: OnPreemption = "wait"  # a started job its queue suspends: wait, or fail now


@dataclass(frozen=True)
class TrainConfig:
    """A validated ``train.yaml``.

    ``command`` is what every rank runs (argv), from the repository root at the pinned SHA.
    ``outputs`` may contain ``{project}``, ``{sha}`` and ``{job}``; expand it with
    :func:`ci_runner.config.outputs.expand_outputs`. ``secrets`` names CI variables whose values are
    passed to every rank through a Kubernetes Secret (never inline in the manifest).
    """

    name: str
    image: str
    command: tuple[str, ...]
    distributed: Distributed = "horovod"
    workers: int = 1
    slots_per_worker: int = 1
    resources: Resources = field(default_factory=Resources)
    requirements: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # sorted (name, value) pairs
    secrets: tuple[str, ...] = ()
    data: str | None = None
    outputs: str | None = None
    metrics: tuple[MetricSpec, ...] = ()
    timeout: int | None = None  # seconds; activeDeadlineSeconds
    elastic: Elastic | None = None
    kubernetes: KubernetesOptions = field(default_factory=KubernetesOptions)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    source_file: str = "train.yaml"  # path of the file inside the repository
    # Each YAML path's line in ``source_file`` (load_config's), for problems found after it.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ranks(self) -> int:
        """Total ranks: workers x slots per worker (with torchrun: nodes x processes per node)."""
        return self.workers * self.slots_per_worker
