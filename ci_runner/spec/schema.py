"""``train.yaml``: its schema (kept as data) and its validation into a TrainConfig.

The schema is the table :data:`SCHEMA`: every field with its kind (type and constraints), default,
description and example, checked by the engine (:mod:`ci_runner.spec.engine`); each record's
builder (:mod:`ci_runner.spec.builders`) makes the dataclasses of :mod:`ci_runner.spec.types`.
:func:`load_config` checks a document against it and reports
every problem in one :class:`~ci_runner.errors.ConfigError`, each with the YAML path, the line and
the fix; :func:`apply_overrides` applies the pipeline's variables and :func:`expand_outputs` fills
in ``outputs``. :mod:`ci_runner.spec.reference` renders the schema as ``docs/train-yaml.md``.
"""

from __future__ import annotations

import shlex
import string
import sys
from dataclasses import replace
from typing import Final

from ci_runner.errors import ConfigError, Problem
from ci_runner.spec.builders import (
    PIP_CACHE_FIX,
    build_dns,
    build_dns_option,
    build_elastic,
    build_kubernetes,
    build_metric,
    build_resources,
    build_toleration,
    build_train,
    pip_cache_conflict,
    pip_cache_fits,
)
from ci_runner.spec.engine import (
    Argv,
    At,
    Context,
    Duration,
    Field,
    Int,
    Invalid,
    ListOf,
    MapOf,
    OneOf,
    Quantity,
    Record,
    Str,
    homes,
    number,
)
from ci_runner.spec.kinds import MetricPattern, RepoPath, Uri
from ci_runner.spec.names import (
    env_name,
    ip_address,
    job_name,
    k8s_name,
    label_key,
    label_value,
    metric_name,
)
from ci_runner.spec.tracking import TRACKING
from ci_runner.spec.types import Effect, Goal, Operator, PvcAccessMode, TrainConfig
from ci_runner.spec.yamlsource import parse

MAX_WORKERS: Final = 512
MAX_NAME_LENGTH: Final = 24  # "<name>-<sha>-<job id>-worker-<n>" must stay a 63-character label
OUTPUT_PLACEHOLDERS: Final = ("project", "sha", "job")
METRIC_GROUPS: Final = ("value", "step", "rank")
# Set by ci-runner in every rank (the Git credentials in the fetch step); not for env or secrets.
RESERVED_ENV: Final = ("DATA_URI", "OUTPUT_URI", "PIP_CACHE_DIR", "GIT_USERNAME", "GIT_PASSWORD")
RESERVED_ENV_PREFIX: Final = "CI_RUNNER_"
WORKERS_VARIABLE: Final = "CI_RUNNER_WORKERS"
ARGS_VARIABLE: Final = "CI_RUNNER_ARGS"

# ---------------------------------------------------------------------------------------------
# The schema.

_ENV_NAME_RULE: Final = env_name(RESERVED_ENV, RESERVED_ENV_PREFIX)
_K8S_NAME: Final = Str(rule=k8s_name("object", subdomain=True))

_TOLERATION: Final = Record(
    Field("key", Str(rule=label_key), "The taint's key.", "gpu"),
    Field(
        "operator",
        OneOf[Operator]("Exists", "Equal"),
        "Exists matches any value.",
        "Exists",
        "`Equal`",
    ),
    Field(
        "value",
        Str(scalars=True, empty=True, rule=label_value),
        "The taint's value (only with operator Equal).",
        "a100",
    ),
    Field(
        "effect",
        OneOf[Effect]("NoSchedule", "PreferNoSchedule", "NoExecute"),
        "The taint effect to tolerate; every effect when omitted.",
        "NoSchedule",
    ),
    Field(
        "toleration_seconds",
        Int(0),
        "How long a NoExecute taint is tolerated before eviction.",
        "300",
    ),
    build=build_toleration,
)

_DNS_OPTION: Final = Record(
    Field("name", Str(spaces=False), "Resolver option name.", "ndots", required=True),
    Field("value", Str(scalars=True, spaces=False), "Resolver option value.", '"2"'),
    build=build_dns_option,
)

_DNS: Final = Record(
    Field(
        "nameservers",
        ListOf(Str(rule=ip_address), doc="list of IP addresses", limit=3),
        "DNS servers for every pod (at most 3).",
        "[10.96.0.10]",
    ),
    Field(
        "searches",
        ListOf(Str(spaces=False), doc="list of domains", limit=32),
        "DNS search domains.",
        "[svc.cluster.local]",
    ),
    Field(
        "options",
        ListOf(_DNS_OPTION, doc="list of mappings"),
        "Resolver options.",
        '[{name: ndots, value: "2"}]',
    ),
    build=build_dns,
)

_KUBERNETES: Final = Record(
    Field(
        "context",
        Str(spaces=False),
        "The kubeconfig context to use; for the GitLab agent for Kubernetes "
        "`<agent configuration project path>:<agent name>`. The CI/CD variable KUBE_CONTEXT "
        "and `--kube-context` override it; when none is given, the kubeconfig's current "
        "context (or its only one).",
        "my-group/k8s-agents:gpu-cluster",
    ),
    Field(
        "namespace",
        Str(rule=k8s_name("namespace", subdomain=False)),
        "Namespace to run in; when omitted, the kubeconfig context's namespace, else the "
        "pod's service account's, else `default`.",
        "ml-training",
    ),
    Field(
        "tolerations",
        ListOf(_TOLERATION, doc="list of mappings"),
        "Taints the pods tolerate (e.g. of GPU nodes).",
        "[{key: gpu, operator: Exists, effect: NoSchedule}]",
    ),
    Field(
        "node_selector",
        MapOf(label_key, Str(scalars=True, empty=True, rule=label_value), doc="mapping"),
        "Node labels the pods must run on.",
        "{gpu-type: a100}",
    ),
    Field("dns_config", _DNS, "The pods' DNS settings (dnsConfig).", "{nameservers: [10.96.0.10]}"),
    Field("service_account", _K8S_NAME, "Service account of the pods.", "trainer"),
    Field("priority_class", _K8S_NAME, "Priority class of the pods.", "high-priority"),
    Field(
        "image_pull_secrets",
        ListOf(_K8S_NAME, doc="list of names", unique=True),
        "Secrets for pulling a private image.",
        "[registry-credentials]",
    ),
    Field(
        "queue",
        _K8S_NAME,
        "Gang-scheduling queue (Volcano or scheduler-plugins); all pods start together.",
        "training",
    ),
    Field(
        "pip_cache_pvc",
        _K8S_NAME,
        "PersistentVolumeClaim holding pip's cache, mounted by every worker; an emptyDir per "
        "worker when omitted. More than one worker needs a ReadWriteMany claim "
        "(`pip_cache_access_mode`).",
        "pip-cache",
    ),
    Field(
        "pip_cache_access_mode",
        OneOf[PvcAccessMode]("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"),
        "The access mode of the `pip_cache_pvc` claim. Only a ReadWriteMany claim is shared "
        "by every worker; with another mode `pip_cache_pvc` is refused for more than one "
        "worker (the second worker could never mount it).",
        "ReadWriteMany",
        "`ReadWriteOnce`",
    ),
    Field(
        "cluster_domain",
        Str(rule=k8s_name("cluster domain", subdomain=True)),
        "The cluster's DNS domain. With `dns_config.nameservers` (dnsPolicy None) the pods "
        "search `svc.<domain>` and `<domain>`, so the launcher resolves the workers' names.",
        "cluster.local",
        "`cluster.local`",
    ),
    Field(
        "ssh_port",
        Int(1, 65535),
        "The port the workers' sshd listens on and the launcher connects to (images built "
        "on mpioperator/base use 2222).",
        "2222",
        "`22`",
    ),
    Field(
        "ttl_seconds_after_finished",
        Int(0),
        "Seconds the launcher Job and its pod stay after they finish, while the MPIJob is kept "
        "(`keep_finished`); without it everything goes once the log is saved.",
        "3600",
        "`3600`",
    ),
    Field("backoff_limit", Int(0), "Launcher retries before the job fails.", "0", "`0`"),
    Field(
        "keep_finished",
        Duration(),
        "How long the finished MPIJob (its pods, their logs, its Secret) is kept for inspection "
        "with kubectl; by default ci-runner deletes it as soon as the log is saved. A kept job is "
        "marked with the annotation `ci-runner/delete-after`; the first `ci-runner train` in the "
        "namespace after that time deletes it (`ci-runner cancel` deletes it at once).",
        "2h",
        "none: deleted at once",
    ),
    Field(
        "setup_timeout",
        Duration(),
        "How long the pods may take to get ready before the launcher starts: image pulls, the "
        "code fetch and the requirements install. When it passes, the job fails naming the "
        "worker that is not Ready and what it waits for; time spent unschedulable does not count "
        "(`unschedulable_timeout` covers it).",
        "45m",
        "`1800` (30m)",
    ),
    Field(
        "unschedulable_timeout",
        Duration(),
        "How long pods may stay unschedulable before the job fails.",
        "10m",
        "`600` (10m)",
    ),
    build=build_kubernetes,
)

SCHEMA: Final = Record(
    Field(
        "name",
        Str(rule=job_name(MAX_NAME_LENGTH)),
        "Job name: lowercase letters, digits and '-', starting with a letter, "
        f"at most {MAX_NAME_LENGTH} characters.",
        "simple-ml",
        required=True,
    ),
    Field(
        "image",
        Str(spaces=False),
        "Container image every pod runs (needs Horovod, sshd, git and pip).",
        "horovod/horovod:0.28.1",
        required=True,
    ),
    Field(
        "command",
        Argv(),
        "What every rank runs, from the repository root: a string (split like a shell would) "
        "or a list of strings.",
        "python train.py --epochs 10",
        required=True,
    ),
    Field("workers", Int(1, MAX_WORKERS), "Number of worker pods.", "2", "`1`"),
    Field(
        "slots_per_worker",
        Int(1, 256),
        "Ranks (processes) per worker.",
        "1",
        "`resources.gpu` if more than 0, else `1`",
    ),
    Field(
        "resources",
        Record(
            Field("gpu", Int(0, 64), "GPUs per worker (nvidia.com/gpu).", "1", "`0`"),
            Field("cpu", Quantity(), "CPU per worker.", "4"),
            Field("memory", Quantity(), "Memory per worker.", "8Gi"),
            build=build_resources,
        ),
        "What every worker requests and is limited to.",
        "{gpu: 1, memory: 8Gi}",
    ),
    Field(
        "requirements",
        RepoPath(),
        "A pip requirements file in the repository, installed before training starts.",
        "requirements.txt",
    ),
    Field(
        "env",
        MapOf(
            _ENV_NAME_RULE,
            Str(scalars=True, empty=True, control=True),
            doc="mapping NAME → string",
        ),
        "Environment variables for every rank; numbers and booleans are kept as written.",
        "{EPOCHS: 10}",
    ),
    Field(
        "secrets",
        ListOf(Str(rule=_ENV_NAME_RULE), doc="list of names", unique=True),
        "CI variables passed to every rank through a Kubernetes Secret.",
        "[WANDB_API_KEY]",
    ),
    Field(
        "data",
        Uri(),
        "Training data location, given to every rank as DATA_URI.",
        "s3://datasets/diabetes/",
    ),
    Field(
        "outputs",
        Uri(OUTPUT_PLACEHOLDERS),
        "Where the model goes, given to every rank as OUTPUT_URI; may use {project}, {sha} "
        "and {job}.",
        "s3://models/{project}/{sha}/{job}/",
    ),
    Field(
        "metrics",
        MapOf(
            metric_name,
            Record(
                Field(
                    "pattern",
                    MetricPattern(METRIC_GROUPS),
                    "Regular expression matched against each log line (without horovodrun's "
                    "`[rank]<stdout>:` prefix, first match); the group `value` is the number, "
                    "optional groups `step` and `rank` (else the prefix's rank). Long logs are "
                    "parsed two to three times faster when the pattern starts with fixed text and "
                    "cannot match a line break: `[^,\\n]+`, not `[^,]+`; no `\\s`, `^`, `$`.",
                    r"'loss: (?P<value>[-+0-9.eE]+)'",
                    required=True,
                ),
                Field(
                    "goal",
                    OneOf[Goal]("min", "max"),
                    "Whether lower or higher is better.",
                    "min",
                    "`min`",
                ),
                build=build_metric,
            ),
            doc="mapping name → mapping",
        ),
        "Metrics parsed from the training log, by name.",
        r"{train_loss: {pattern: 'loss: (?P<value>[-+0-9.eE]+)'}}",
    ),
    Field(
        "timeout",
        Duration(),
        "Longest the job may run (at most 7d); no limit when omitted.",
        "2h",
    ),
    Field(
        "elastic",
        Record(
            Field("min_workers", Int(1, MAX_WORKERS), "Fewest workers.", "1", required=True),
            Field("max_workers", Int(1, MAX_WORKERS), "Most workers.", "4", required=True),
            build=build_elastic,
        ),
        "Elastic Horovod: keep training with between min_workers and max_workers workers.",
        "{min_workers: 1, max_workers: 4}",
    ),
    Field("kubernetes", _KUBERNETES, "Cluster settings.", "{namespace: ml-training}"),
    Field(
        "tracking", TRACKING, "Log the run as an MLflow run (see the README's Tracking).", "gitlab"
    ),
    build=build_train,
)

_HOMES: Final = homes(SCHEMA)


# ---------------------------------------------------------------------------------------------
# Public API.


def load_config(text: str | bytes, file: str = "train.yaml") -> TrainConfig:
    """Validate ``train.yaml`` text; raise ConfigError listing every problem found."""
    document = parse(text, file)
    context = Context(file, list(document.problems), homes=_HOMES)
    config = SCHEMA.check(document.root, At(context, "", "name: my-job"))
    if context.problems or isinstance(config, Invalid):
        raise ConfigError(_in_order(context.problems))
    return replace(config, source_file=file)


def apply_overrides(
    config: TrainConfig, *, workers: str | None, extra_args: str | None
) -> TrainConfig:
    """Apply the pipeline variables CI_RUNNER_WORKERS and CI_RUNNER_ARGS (empty means unset).

    ``workers`` replaces the worker count (checked like the file's); ``extra_args`` is split like
    a shell would and appended to the command. Raises ConfigError listing every problem.
    """
    problems: list[Problem] = []
    new_workers, new_command = config.workers, config.command
    if workers is not None and workers.strip():
        value = workers.strip()
        low, high = (
            (config.elastic.min_workers, config.elastic.max_workers)
            if config.elastic is not None
            else (1, MAX_WORKERS)
        )
        if not value.isdigit() or not value.isascii():
            problems.append(
                Problem(
                    WORKERS_VARIABLE,
                    "",
                    None,
                    f"must be a whole number, got {_uncut(workers)}",
                    f"set {WORKERS_VARIABLE} to a number from 1 to {MAX_WORKERS}, e.g. 2",
                )
            )
        elif len(value.lstrip("0")) > 6 or not low <= int(value) <= high:
            within = " (elastic.min_workers to elastic.max_workers)" if config.elastic else ""
            problems.append(
                Problem(
                    WORKERS_VARIABLE,
                    "",
                    None,
                    f"must be from {low} to {high}{within}, got {number(value)}",
                    f"set {WORKERS_VARIABLE} to a number from {low} to {high}",
                )
            )
        elif not pip_cache_fits(config.kubernetes, int(value)):
            problems.append(
                Problem(
                    WORKERS_VARIABLE,
                    "",
                    None,
                    pip_cache_conflict(config.kubernetes, int(value)),
                    f"set {WORKERS_VARIABLE} to 1, or {PIP_CACHE_FIX}",
                )
            )
        else:
            new_workers = int(value)
    if extra_args is not None and extra_args.strip():
        try:
            args = shlex.split(extra_args)
        except ValueError:
            problems.append(
                Problem(
                    ARGS_VARIABLE,
                    "",
                    None,
                    f"has an unbalanced quote or a trailing backslash: {_uncut(extra_args)}",
                    "close every quote (the value is split like a shell command line)",
                )
            )
        else:
            if any("\x00" in arg for arg in args):
                problems.append(
                    Problem(
                        ARGS_VARIABLE,
                        "",
                        None,
                        "must not contain a NUL character",
                        "remove it",
                    )
                )
            else:
                new_command = (*config.command, *args)
    if problems:
        raise ConfigError(problems)
    return replace(config, workers=new_workers, command=new_command)


def _uncut(value: str, limit: int = 200) -> str:
    """A CI variable's value for a message: whole or not at all. A value cut short could end
    half-way through a secret the variable expanded, which the log's masker would not recognise."""
    return repr(value) if len(value) <= limit else f"a value of {len(value)} characters"


def expand_outputs(template: str, *, project: str, sha: str, job: str) -> str:
    """``outputs`` with {project}, {sha} and {job} filled in ({{ and }} are literal braces)."""
    values = {"project": project, "sha": sha, "job": job}
    parts: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        if name not in values or spec or conversion:
            raise ValueError(f"unknown placeholder in outputs: {name!r}")  # validated before
        parts.append(values[name])
    return "".join(parts)


def _in_order(problems: list[Problem]) -> list[Problem]:
    """Problems sorted by line (stable), those without a line last."""
    return sorted(problems, key=lambda problem: problem.line or sys.maxsize)
