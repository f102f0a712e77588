"""``train.yaml``: its schema (kept as data) and its validation into a TrainConfig.

The schema is the table :data:`SCHEMA`: every field with its kind (type and constraints), default,
description and example, checked by the engine (:mod:`ci_runner.config.engine`); each record's
builder (:mod:`ci_runner.config.builders`) makes the dataclasses of :mod:`ci_runner.config.types`.
:func:`load_config` checks a document against it and reports
every problem in one :class:`~ci_runner.errors.ConfigError`, each with the YAML path, the line and
the fix. :mod:`ci_runner.config.overrides` applies a pipeline's variables over it,
:mod:`ci_runner.config.outputs` fills in ``outputs``; :mod:`ci_runner.config.reference` renders
the schema as ``docs/train-yaml.md``.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import replace
from typing import Final

from ci_runner.config.affinity import Affinity
from ci_runner.config.builders import (
    build_dns,
    build_dns_option,
    build_elastic,
    build_kubernetes,
    build_launcher,
    build_metric,
    build_resources,
    build_toleration,
    build_train,
)
from ci_runner.config.container_resources import NoneOrResources
from ci_runner.config.engine import At, Context, Field, Invalid, ListOf, MapOf, Record, homes
from ci_runner.config.kinds import (
    EnvValues,
    MetricPattern,
    RepoPath,
    Uri,
    credential_in_command,
)
from ci_runner.config.names import (
    env_name,
    ip_address,
    k8s_name,
    label_key,
    label_value,
    metric_name,
    name_prefix,
)
from ci_runner.config.outputs import OUTPUT_PLACEHOLDERS
from ci_runner.config.scalars import Argv, Duration, Int, OneOf, Quantity, Str
from ci_runner.config.setup_env import PIP_SETTINGS
from ci_runner.config.tracking import TRACKING
from ci_runner.config.types import (
    LAUNCHER_DISK,
    LAUNCHER_RESOURCES,
    SETUP_RESOURCES,
    SHM_MAX,
    SHM_WITHOUT_MEMORY,
    Effect,
    Goal,
    KubernetesOptions,
    MetricSpec,
    OnPreemption,
    Operator,
    PvcAccessMode,
    Resources,
    Toleration,
    TrainConfig,
)
from ci_runner.config.yamlsource import parse
from ci_runner.errors import ConfigError, Problem

MAX_WORKERS: Final = 512
MAX_NAME_LENGTH: Final = 24  # "<name>-<sha>-<job id>-worker-<n>" must stay a 63-character label
METRIC_GROUPS: Final = ("value", "step", "rank")
# Set by ci-runner in every rank (the Git credentials in the fetch step); not for env or secrets.
RESERVED_ENV: Final = ("DATA_URI", "OUTPUT_URI", "PIP_CACHE_DIR", "GIT_USERNAME", "GIT_PASSWORD")
RESERVED_ENV_PREFIX: Final = "CI_RUNNER_"


def _default(record: type, key: str, *, duration: bool = False) -> str:
    """The reference's default for ``key``: the dataclass's own default (written once, in
    :mod:`ci_runner.config.types`), with a duration's short form: "`1800` (30m)"."""
    value = next(f.default for f in dataclasses.fields(record) if f.name == key)
    shown = f"`{value}`"
    if not duration or not isinstance(value, int):
        return shown
    for unit, seconds in (("h", 3600), ("m", 60)):
        if value and value % seconds == 0:
            return f"{shown} ({value // seconds}{unit})"
    return f"{shown} ({value}s)"


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
        _default(Toleration, "operator"),
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

_NODE_SELECTOR: Final = MapOf(
    label_key, Str(scalars=True, empty=True, rule=label_value), doc="mapping"
)

_LAUNCHER: Final = Record(
    Field(
        "node_selector",
        _NODE_SELECTOR,
        "Node labels the launcher pod must run on.",
        "{pool: cpu}",
    ),
    Field(
        "tolerations",
        ListOf(_TOLERATION, doc="list of mappings"),
        "Taints the launcher pod tolerates.",
        "[{key: spot, operator: Exists}]",
    ),
    Field(
        "affinity",
        Affinity(),
        "The launcher pod's affinity, as Kubernetes writes it (`nodeAffinity`, `podAffinity`, "
        "`podAntiAffinity`).",
        "{nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [...]}}",
    ),
    build=build_launcher,
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
        "Taints the workers tolerate (e.g. of GPU nodes); the launcher's are "
        "`launcher.tolerations`.",
        "[{key: gpu, operator: Exists, effect: NoSchedule}]",
    ),
    Field(
        "node_selector",
        _NODE_SELECTOR,
        "Node labels the workers must run on (the launcher: `launcher.node_selector`).",
        "{gpu-type: a100}",
    ),
    Field(
        "launcher",
        _LAUNCHER,
        "Where the launcher pod (mpirun: 500m of CPU, no GPU) may run. It gets none of the "
        "workers' `node_selector` and `tolerations`, so that it takes no slot on a GPU node.",
        "{node_selector: {pool: cpu}}",
        "none: any node without a taint",
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
        "PersistentVolumeClaim holding pip's cache and the virtualenvs installed with it, "
        "mounted by every worker; an emptyDir per worker when omitted. A later start whose "
        "requirements files (and those they include), image and `PIP_*` settings are the same "
        "runs no pip: an unpinned requirement stays at the version first installed until one "
        "of them changes. Requirements that name a local path are never kept; a virtualenv no "
        "start used for 14 days is removed. More than one worker needs a ReadWriteMany claim "
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
        _default(KubernetesOptions, "pip_cache_access_mode"),
    ),
    Field(
        "cluster_domain",
        Str(rule=k8s_name("cluster domain", subdomain=True)),
        "The cluster's DNS domain. With `dns_config.nameservers` (dnsPolicy None) the pods "
        "search `svc.<domain>` and `<domain>`, so the launcher resolves the workers' names.",
        "cluster.local",
        _default(KubernetesOptions, "cluster_domain"),
    ),
    Field(
        "ssh_port",
        Int(1, 65535),
        "The port the workers' sshd listens on and the launcher connects to (images built "
        "on mpioperator/base use 2222).",
        "2222",
        _default(KubernetesOptions, "ssh_port"),
    ),
    Field(
        "run_as_user",
        Int(1, 2**31 - 1),
        "A non-root user of the image (its numeric uid) that every container runs as, sshd "
        "included, on `ssh_port` (1024 or more): the workers then meet PodSecurity "
        "`restricted`. Without it the workers run the image's sshd as root (`baseline`), and "
        "the launcher and the setup containers run as 65534 (`nobody`). The user needs a home "
        "and a login shell; sshd runs with PAM (`UsePAM yes`, as Debian's and Ubuntu's "
        "configuration has it), without which OpenSSH refuses an account it takes for locked.",
        "1000",
    ),
    Field(
        "ttl_seconds_after_finished",
        Int(0),
        "Seconds the launcher Job and its pod stay after they finish, while the MPIJob is kept "
        "(`keep_finished`); without it everything goes once the log is saved.",
        "3600",
        _default(KubernetesOptions, "ttl_seconds_after_finished"),
    ),
    Field(
        "backoff_limit",
        Int(0),
        "Launcher retries before the job fails.",
        "0",
        _default(KubernetesOptions, "backoff_limit"),
    ),
    Field(
        "keep_finished",
        Duration(),
        "How long the finished MPIJob (its pods, their logs, its Secret) is kept for inspection "
        "with kubectl; by default ci-runner deletes it as soon as the log is saved. A kept job is "
        "marked with the annotation `ci-runner/delete-after`; the first `ci-runner train` or "
        "`ci-runner cancel` in the namespace after that time deletes it (`ci-runner cancel` of "
        "its own CI job at once). Every job is stamped so at submission too, "
        "`unschedulable_timeout` after its workers' deadline (see `timeout`): what a killed CI "
        "job leaves is deleted the same way.",
        "2h",
        "none: deleted at once",
    ),
    Field(
        "setup_timeout",
        Duration(),
        "How long the pods may take to get ready before the launcher starts: image pulls, the "
        "code fetch and the requirements install. When it passes, the job fails naming the "
        "worker that is not Ready and what it waits for; time spent unschedulable does not count "
        "(`unschedulable_timeout` covers it), nor time spent suspended by a queue. A job the "
        "queue resumes sets up again with the full time, and one whose workers are all Ready "
        "but whose launcher does not start fails when it passes, saying why.",
        "45m",
        _default(KubernetesOptions, "setup_timeout", duration=True),
    ),
    Field(
        "unschedulable_timeout",
        Duration(),
        "How long pods may stay unschedulable before the job fails.",
        "10m",
        _default(KubernetesOptions, "unschedulable_timeout", duration=True),
    ),
    Field(
        "on_preemption",
        OneOf[OnPreemption]("wait", "fail"),
        "What ci-runner does when a queue (Kueue, or another that sets the MPIJob's "
        "`runPolicy.suspend`) suspends the job after it started: `wait` keeps the CI job "
        "waiting until the queue resumes it, and the job then sets up and trains again from the "
        "start; `fail` ends the run at once as a failure and deletes the MPIJob, so the queue "
        "does not resume it later. A job that is queued before it starts waits either way.",
        "fail",
        _default(KubernetesOptions, "on_preemption"),
    ),
    build=build_kubernetes,
)

SCHEMA: Final = Record(
    Field(
        "name",
        Str(rule=name_prefix(MAX_NAME_LENGTH)),
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
        Argv(credential_in_command),
        "What every rank runs, from the repository root: a string (split like a shell would) "
        "or a list of strings. ci-runner starts mpirun itself, and no shell runs the command: "
        "`&&`, `;`, `|`, redirections and `$VAR` reach the program as they are (validate warns); "
        "run a script of the repository for more than one step.",
        "python train.py --epochs 10",
        required=True,
    ),
    Field(
        "workers",
        Int(1, MAX_WORKERS),
        "Number of worker pods.",
        "2",
        _default(TrainConfig, "workers"),
    ),
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
            Field(
                "gpu",
                Int(0, 64),
                "GPUs per worker (nvidia.com/gpu).",
                "1",
                _default(Resources, "gpu"),
            ),
            Field("cpu", Quantity(), "CPU per worker.", "4"),
            Field("memory", Quantity(), "Memory per worker.", "8Gi"),
            Field(
                "shm",
                Quantity(),
                "The size of each worker's `/dev/shm`: a memory-backed emptyDir (a container "
                "runtime gives 64 MiB, too little for PyTorch DataLoader workers, NCCL and "
                "OpenMPI's shared-memory transport). What the ranks write there counts against "
                "`memory`, so it may not be more.",
                "8Gi",
                f"half of `memory`, at most `{SHM_MAX}`; `{SHM_WITHOUT_MEMORY}` without `memory`",
            ),
            Field(
                "disk",
                Quantity(),
                "What each worker may write to its node's disk (ephemeral-storage, requested "
                "and the limit): the checkout, the requirements' virtualenv and pip's cache "
                "(each an emptyDir of at most this size) and the container's own writes. Past "
                "it the kubelet evicts the worker. The launcher gets "
                f"`{LAUNCHER_DISK}`.",
                "50Gi",
                _default(Resources, "disk"),
            ),
            Field(
                "setup",
                NoneOrResources(SETUP_RESOURCES, "of each init container"),
                "What each pod's init containers (fetch-code, install-requirements) request and "
                "are limited to. A namespace whose ResourceQuota counts cpu or memory refuses a "
                "pod unless every container declares both; `none` declares nothing, so the "
                "namespace's LimitRange defaults apply.",
                "{cpu: 2, memory: 4Gi}",
                f"`{{cpu: {SETUP_RESOURCES.cpu}, memory: {SETUP_RESOURCES.memory}}}`",
            ),
            Field(
                "launcher",
                NoneOrResources(LAUNCHER_RESOURCES, "of the launcher"),
                "What the launcher container (mpirun) requests and is limited to; `none`: "
                "the namespace's LimitRange defaults.",
                "none",
                f"`{{cpu: {LAUNCHER_RESOURCES.cpu}, memory: {LAUNCHER_RESOURCES.memory}}}`",
            ),
            build=build_resources,
        ),
        "What every worker requests and is limited to (cpu and memory are both the request and "
        "the limit), and what ci-runner's own containers get.",
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
        EnvValues(_ENV_NAME_RULE, doc="mapping NAME → string"),
        "Environment variables for every rank; numbers and booleans are kept as written, and "
        "`$(NAME)` stays those characters (Kubernetes does not expand it). The setup containers "
        "get none of them but pip's settings, which install-requirements gets too: "
        + ", ".join(f"`{name}`" for name in PIP_SETTINGS)
        + ". A value that holds a credential (a URL with user:password@, a GitLab, GitHub, "
        "Hugging Face, Slack or API token, an AWS key, a private key) is refused: list the name "
        "of a masked CI/CD variable under `secrets` instead.",
        "{EPOCHS: 10}",
    ),
    Field(
        "secrets",
        ListOf(Str(rule=_ENV_NAME_RULE), doc="list of names", unique=True),
        "CI variables passed to every rank through a Kubernetes Secret; one named as a pip "
        "setting that `env` passes on (such as `PIP_INDEX_URL` with a password) also reaches "
        "install-requirements.",
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
                    "`[rank]<stdout>:` prefix, first match) by RE2, in time linear in the line: "
                    "no backreferences, lookarounds, atomic groups or possessive repeats, and "
                    "`\\d`, `\\w`, `\\b` are ASCII; the group `value` is the number, "
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
                    _default(MetricSpec, "goal"),
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
        "Longest the training may run (at most 7d): the launcher Job's activeDeadlineSeconds. "
        "When omitted in a CI job, what the CI job's timeout (CI_JOB_TIMEOUT, GitLab 15.7+) "
        "leaves, less 5 minutes for the report; outside CI, no limit. Longer than the CI job's "
        "timeout: a warning. Each pod also stops at a deadline of its own, counted from its "
        "start, so that none outlives a killed CI job: the launcher at this limit + 10m, a worker "
        "at `setup_timeout` + `unschedulable_timeout` + this limit + 10m (7d when there is no "
        "limit).",
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


def _in_order(problems: list[Problem]) -> list[Problem]:
    """Problems sorted by line (stable), those without a line last."""
    return sorted(problems, key=lambda problem: problem.line or sys.maxsize)
