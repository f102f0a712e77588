"""Builders: a record's checked values → the dataclasses of :mod:`ci_runner.config.types`.

Each record of the schema has a TypedDict of its checked values (the types its fields' kinds
give) and a builder, which also makes the checks that involve several fields. A builder runs even
when a field was invalid (``ok`` is False), so that one run reports everything it can.
"""

from __future__ import annotations

import re
from typing import Final, TypedDict

from ci_runner import variables
from ci_runner.config.engine import INVALID, At, Invalid
from ci_runner.config.quantity import quantity_value
from ci_runner.config.types import (
    UNPRIVILEGED_PORT,
    ContainerResources,
    Distributed,
    DnsConfig,
    Effect,
    Elastic,
    Goal,
    KubernetesOptions,
    LauncherPlacement,
    MetricSpec,
    OnPreemption,
    Operator,
    PvcAccessMode,
    Resources,
    Toleration,
    TrackingSpec,
    TrainConfig,
)
from ci_runner.config.yamlsource import key_path


class ResourcesValues(TypedDict, total=False):
    gpu: int
    cpu: str
    memory: str
    setup: ContainerResources
    launcher: ContainerResources
    shm: str
    disk: str


def build_resources(
    values: ResourcesValues, at: At, ok: bool, keys: frozenset[str]
) -> Resources | Invalid:
    shm, memory = values.get("shm"), values.get("memory")
    if shm is not None and memory is not None and quantity_value(shm) > quantity_value(memory):
        # /dev/shm's pages are the worker's memory: more than the limit is an OOM kill.
        at.problem(
            at.line_of("shm") or at.context.lines.get(at.path),
            f"{shm} is more than the worker's memory ({memory}): what ranks write to /dev/shm "
            "counts against it",
            f"set shm to at most {memory}, or raise resources.memory",
            path=key_path(at.path, "shm"),
        )
        ok = False
    return Resources(**values) if ok else INVALID


class TolerationValues(TypedDict, total=False):
    key: str
    operator: Operator
    value: str
    effect: Effect
    toleration_seconds: int


def build_toleration(
    values: TolerationValues, at: At, ok: bool, keys: frozenset[str]
) -> Toleration | Invalid:
    # Each check runs when the fields it reads are valid, so one run reports everything.
    operator = values.get("operator", Toleration.operator if "operator" not in keys else None)
    effect = values.get("effect", "" if "effect" not in keys else None)
    checks = [
        (
            operator == "Exists" and "value" in keys,
            "value",
            "must not be set when operator is Exists",
            "remove value, or use operator: Equal",
        ),
        (
            operator == "Equal" and "key" not in keys,
            "key",
            "is required when operator is Equal (the default)",
            "add the taint's key, or use operator: Exists to tolerate every taint",
        ),
        (
            "toleration_seconds" in keys and effect is not None and effect != "NoExecute",
            "toleration_seconds",
            "needs effect: NoExecute",
            "set effect: NoExecute, or remove toleration_seconds",
        ),
    ]
    for wrong, key, message, fix in checks:
        if wrong:
            line = at.line_of(key) or at.context.lines.get(at.path)
            at.problem(line, message, fix, path=key_path(at.path, key))
            ok = False
    return Toleration(**values) if ok else INVALID


class DnsOptionValues(TypedDict, total=False):
    name: str
    value: str


def build_dns_option(
    values: DnsOptionValues, at: At, ok: bool, keys: frozenset[str]
) -> tuple[str, str | None] | Invalid:
    return (values["name"], values.get("value")) if ok else INVALID


class DnsValues(TypedDict, total=False):
    nameservers: tuple[str, ...]
    searches: tuple[str, ...]
    options: tuple[tuple[str, str | None], ...]


def build_dns(values: DnsValues, at: At, ok: bool, keys: frozenset[str]) -> DnsConfig | Invalid:
    return DnsConfig(**values) if ok else INVALID


class LauncherValues(TypedDict, total=False):
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    affinity: str


def build_launcher(
    values: LauncherValues, at: At, ok: bool, keys: frozenset[str]
) -> LauncherPlacement | Invalid:
    if not ok:
        return INVALID
    if "node_selector" in values:
        values["node_selector"] = tuple(sorted(values["node_selector"]))
    return LauncherPlacement(**values)


class KubernetesValues(TypedDict, total=False):
    context: str
    namespace: str
    tolerations: tuple[Toleration, ...]
    node_selector: tuple[tuple[str, str], ...]
    dns_config: DnsConfig
    service_account: str
    priority_class: str
    image_pull_secrets: tuple[str, ...]
    queue: str
    local_queue: str
    workload_priority_class: str
    queue_timeout: int
    pip_cache_pvc: str
    pip_cache_access_mode: PvcAccessMode
    cluster_domain: str
    ssh_port: int
    run_as_user: int
    launcher: LauncherPlacement
    ttl_seconds_after_finished: int
    backoff_limit: int
    keep_finished: int
    setup_timeout: int
    unschedulable_timeout: int
    on_preemption: OnPreemption


def build_kubernetes(
    values: KubernetesValues, at: At, ok: bool, keys: frozenset[str]
) -> KubernetesOptions | Invalid:
    if not ok:
        return INVALID
    if "node_selector" in values:
        values["node_selector"] = tuple(sorted(values["node_selector"]))
    if _queue_conflicts(values, at):
        return INVALID
    port = values.get("ssh_port", KubernetesOptions.ssh_port)
    if "run_as_user" in values and port < UNPRIVILEGED_PORT:
        at.problem(
            at.line_of("ssh_port") or at.line_of("run_as_user"),
            f"sshd as user {values['run_as_user']} cannot listen on port {port} (below "
            f"{UNPRIVILEGED_PORT}, and no capability is given)",
            "set kubernetes.ssh_port: 2222 (or another port from 1024 up), as images built on "
            "mpioperator/base do",
            path=key_path(at.path, "ssh_port"),
        )
        return INVALID
    return KubernetesOptions(**values)


def _queue_conflicts(values: KubernetesValues, at: At) -> bool:
    """Record Kueue's fields without ``local_queue``, or with Volcano's ``queue``; whether any."""
    found = False
    if "local_queue" in values and "queue" in values:
        found = True
        at.problem(
            at.line_of("queue"),
            "names Volcano's or scheduler-plugins' gang queue, and local_queue Kueue's: a job "
            "is admitted by one of them",
            "keep local_queue for Kueue, or queue for Volcano or scheduler-plugins",
            path=key_path(at.path, "queue"),
        )
    if "local_queue" not in values:
        for key in ("workload_priority_class", "queue_timeout"):
            if key in values:
                found = True
                at.problem(
                    at.line_of(key),
                    "is for a job in Kueue's queue, and kubernetes.local_queue names none",
                    f"set kubernetes.local_queue to the LocalQueue the job waits in, or remove "
                    f"kubernetes.{key}",
                    path=key_path(at.path, key),
                )
    return found


PIP_CACHE_FIX: Final = (
    "give the claim access mode ReadWriteMany and set kubernetes.pip_cache_access_mode: "
    "ReadWriteMany, or remove pip_cache_pvc (each worker then caches in its own emptyDir)"
)


def pip_cache_fits(kubernetes: KubernetesOptions, workers: int) -> bool:
    """Whether every worker can mount the pip cache claim: a claim mounted by one node
    (ReadWriteOnce) or one pod (ReadWriteOncePod) leaves a second worker's pod in
    ContainerCreating for ever (Multi-Attach), so it serves one worker only."""
    return (
        kubernetes.pip_cache_pvc is None
        or workers <= 1
        or kubernetes.pip_cache_access_mode == "ReadWriteMany"
    )


def elastic_range(elastic: Elastic, name: str, got: str) -> tuple[str, str]:
    """The problem with a starting worker count ``got`` (set as ``name``: train.yaml's
    ``workers`` or CI_RUNNER_WORKERS) outside ``elastic``'s range: what, and the fix."""
    low, high = elastic.min_workers, elastic.max_workers
    return (
        f"must be from {low} to {high} (elastic.min_workers to elastic.max_workers), got {got}",
        f"set {name} to how many workers to start with, from {low} to {high}",
    )


def pip_cache_conflict(kubernetes: KubernetesOptions, workers: int) -> str:
    return (
        f"a {kubernetes.pip_cache_access_mode} claim can serve one worker, not {workers}: "
        "the other workers would wait for it for ever (Multi-Attach)"
    )


class MetricValues(TypedDict, total=False):
    pattern: re.Pattern[str]
    goal: Goal


def build_metric(
    values: MetricValues, at: At, ok: bool, keys: frozenset[str]
) -> tuple[re.Pattern[str], Goal] | Invalid:
    return (values["pattern"], values.get("goal", MetricSpec.goal)) if ok else INVALID


class ElasticValues(TypedDict, total=False):
    min_workers: int
    max_workers: int


def build_elastic(
    values: ElasticValues, at: At, ok: bool, keys: frozenset[str]
) -> Elastic | Invalid:
    low, high = values.get("min_workers"), values.get("max_workers")
    if low is not None and high is not None and low > high:
        return at.problem(
            at.line_of("min_workers"),
            f"must not be more than max_workers, got {values['min_workers']} > "
            f"{values['max_workers']}",
            "lower min_workers or raise max_workers",
            path=key_path(at.path, "min_workers"),
        )
    return Elastic(values["min_workers"], values["max_workers"]) if ok else INVALID


class _TrainConfigValues(TypedDict, total=False):
    name: str
    image: str
    command: tuple[str, ...]
    distributed: Distributed
    workers: int
    slots_per_worker: int
    resources: Resources
    requirements: str
    env: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...]
    data: str
    outputs: str
    timeout: int
    elastic: Elastic
    kubernetes: KubernetesOptions
    tracking: TrackingSpec


class TrainValues(_TrainConfigValues, total=False):
    metrics: tuple[tuple[str, tuple[re.Pattern[str], Goal]], ...]


# What torchrun (torch.distributed.run, its static rendezvous) and the Indexed Job set in every
# rank or node: a train.yaml value would be overwritten, or would mislead torchrun.
TORCHRUN_ENV: Final = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    variables.JOB_COMPLETION_INDEX,
)
TORCHRUN_ENV_PREFIXES: Final = ("PET_", "TORCHELASTIC_", "TORCH_ELASTIC_")
TORCHRUN_ONLY_HOROVOD: Final = "or set distributed: horovod"


def torchrun_sets(name: str) -> bool:
    """Whether torchrun or the Indexed Job sets ``name`` for the ranks (:data:`TORCHRUN_ENV`)."""
    return name in TORCHRUN_ENV or name.startswith(TORCHRUN_ENV_PREFIXES)


def torchrun_conflicts(values: TrainValues, at: At) -> bool:
    """Record what ``distributed: torchrun`` cannot run (``elastic``, ``kubernetes.queue``, a
    variable torchrun sets in ``env`` or ``secrets``); whether there was any."""
    lines = at.context.lines
    found: list[tuple[int | None, str, str, str]] = []
    if "elastic" in values:
        found.append(
            (
                lines.get("elastic"),
                "elastic",
                "is Elastic Horovod's; torchrun runs a fixed number of nodes",
                f"remove elastic (workers is the number of nodes), {TORCHRUN_ONLY_HOROVOD}",
            )
        )
    kubernetes = values.get("kubernetes")
    if kubernetes is not None and kubernetes.queue is not None:
        found.append(
            (
                lines.get("kubernetes.queue"),
                "kubernetes.queue",
                "is a gang queue of the MPIJob's schedulingPolicy; torchrun's Indexed Job has none",
                f"remove kubernetes.queue, {TORCHRUN_ONLY_HOROVOD}",
            )
        )
    named = [(key_path("env", name), name) for name, _ in values.get("env", ())]
    named += [(f"secrets[{i}]", name) for i, name in enumerate(values.get("secrets", ()))]
    reserved = ", ".join(TORCHRUN_ENV) + " and " + ", ".join(f"{p}*" for p in TORCHRUN_ENV_PREFIXES)
    for path, name in named:
        if torchrun_sets(name):
            setter = "the Indexed Job" if name == variables.JOB_COMPLETION_INDEX else "torchrun"
            found.append(
                (
                    lines.get(path),
                    path,
                    f"{name} is set by {setter} for every rank",
                    f"choose another name ({reserved} are torchrun's), {TORCHRUN_ONLY_HOROVOD}",
                )
            )
    for line, path, message, fix in found:
        at.problem(line, message, fix, path=path)
    return bool(found)


def build_train(
    values: TrainValues, at: At, ok: bool, keys: frozenset[str]
) -> TrainConfig | Invalid:
    workers = values.get("workers", TrainConfig.workers if "workers" not in keys else None)
    elastic = values.get("elastic")
    if (
        elastic is not None
        and workers is not None
        and not elastic.min_workers <= workers <= elastic.max_workers
    ):
        line = at.line_of("workers") or at.line_of("elastic")
        at.problem(line, *elastic_range(elastic, "workers", str(workers)), path="workers")
        ok = False
    kubernetes = values.get("kubernetes")
    most = elastic.max_workers if elastic is not None else workers
    if kubernetes is not None and most is not None and not pip_cache_fits(kubernetes, most):
        at.problem(
            at.context.lines.get("kubernetes.pip_cache_pvc"),
            pip_cache_conflict(kubernetes, most),
            PIP_CACHE_FIX,
            path="kubernetes.pip_cache_pvc",
        )
        ok = False
    env_names = {name for name, _ in values.get("env", ())}
    for index, name in enumerate(values.get("secrets", ())):
        if name in env_names:
            at.problem(
                at.context.lines.get(f"secrets[{index}]", at.line_of("secrets")),
                f"{name} is also set in env",
                "keep it in one place: secrets for CI variables, env for plain values",
                path=f"secrets[{index}]",
            )
            ok = False
    if values.get("distributed") == "torchrun" and torchrun_conflicts(values, at):
        ok = False
    if not ok:
        return INVALID
    resources = values.get("resources", Resources())
    metrics = tuple(
        MetricSpec(name, pattern, goal) for name, (pattern, goal) in values.pop("metrics", ())
    )
    fields: _TrainConfigValues = values  # without "metrics", popped above
    fields["slots_per_worker"] = values.get(
        "slots_per_worker", resources.gpu if resources.gpu > 0 else TrainConfig.slots_per_worker
    )
    fields["env"] = tuple(sorted(values.get("env", ())))
    return TrainConfig(**fields, metrics=metrics)
