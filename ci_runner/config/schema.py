"""``train.yaml``: its schema (kept as data) and its validation into a TrainConfig.

The schema is the table :data:`SCHEMA`: every field with its kind (type and constraints), default,
description and example, checked by the engine (:mod:`ci_runner.config.engine`); each record's
builder (:mod:`ci_runner.config.builders`) makes the dataclasses of :mod:`ci_runner.config.types`.
The ``kubernetes`` and ``tracking`` mappings are :mod:`ci_runner.config.kubernetes`'s and
:mod:`ci_runner.config.tracking`'s.
:func:`load_config` checks a document against it and reports
every problem in one :class:`~ci_runner.errors.ConfigError`, each with the YAML path, the line and
the fix. :mod:`ci_runner.config.overrides` applies a pipeline's variables over it,
:mod:`ci_runner.config.outputs` fills in ``outputs``; :mod:`testing.reference_schema` renders
the schema as ``docs/train-yaml.md``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from types import MappingProxyType
from typing import Final

from ci_runner import variables
from ci_runner.config.builders import (
    build_elastic,
    build_metric,
    build_resources,
    build_train,
)
from ci_runner.config.container_resources import NoneOrResources
from ci_runner.config.engine import (
    At,
    Context,
    Field,
    Invalid,
    ListOf,
    MapOf,
    Record,
    homes,
    shown_default,
)
from ci_runner.config.kinds import (
    EnvValues,
    MetricPattern,
    RepoPath,
    Uri,
    credential_in_command,
)
from ci_runner.config.kubernetes import KUBERNETES
from ci_runner.config.names import (
    env_name,
    metric_name,
    name_prefix,
)
from ci_runner.config.outputs import OUTPUT_PLACEHOLDERS
from ci_runner.config.scalars import Argv, Duration, Int, OneOf, Quantity, Str
from ci_runner.config.setup_env import PIP_SETTINGS
from ci_runner.config.tracking import TRACKING
from ci_runner.config.types import (
    DISTRIBUTED_KINDS,
    LAUNCHER_DISK,
    LAUNCHER_RESOURCES,
    SETUP_RESOURCES,
    SHM_MAX,
    SHM_WITHOUT_MEMORY,
    Distributed,
    Goal,
    MetricSpec,
    Resources,
    TrainConfig,
)
from ci_runner.config.yamlsource import parse
from ci_runner.errors import ConfigError, Problem

MAX_WORKERS: Final = 512
# Metric patterns train.yaml may declare. Each is searched in every line of the log, so the parse
# slows in proportion (measured: 1 pattern ~80,000 lines/s, 32 ~6,500, 2,400 ~80); a job reports
# a handful (a loss and an accuracy per split, the learning rate, the throughput).
MAX_METRICS: Final = 32
MAX_NAME_LENGTH: Final = 24  # "<name>-<sha>-<job id>-worker-<n>" must stay a 63-character label
METRIC_GROUPS: Final = ("value", "step", "rank")
# Set by ci-runner in every rank (the Git credentials in the fetch step); not for env or secrets.
RESERVED_ENV: Final = ("DATA_URI", "OUTPUT_URI", "PIP_CACHE_DIR", "GIT_USERNAME", "GIT_PASSWORD")
RESERVED_ENV_PREFIX: Final = variables.CI_RUNNER_PREFIX
# A worker count: ``workers``, ``elastic``'s bounds and the pipeline variable CI_RUNNER_WORKERS.
WORKER_COUNT: Final = Int(1, MAX_WORKERS)


# ---------------------------------------------------------------------------------------------
# The schema.

_ENV_NAME_RULE: Final = env_name(RESERVED_ENV, RESERVED_ENV_PREFIX)

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
        "distributed",
        OneOf[Distributed](*DISTRIBUTED_KINDS),
        "How the ranks start. `horovod`: an MPIJob (the MPI Operator), whose launcher starts "
        "every rank with mpirun over ssh (the image needs Horovod, sshd and OpenMPI). "
        "`torchrun`: PyTorch's launcher (DDP, FSDP) in every pod of a Kubernetes Indexed Job, "
        "node 0 found through a headless Service (no operator, sshd or MPI; the image needs "
        "torch, as `pytorch/pytorch` images have): `workers` is the number of nodes (pods), "
        "`slots_per_worker` the processes on each, and `elastic`, `kubernetes.queue` and the "
        "variables torchrun sets (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, "
        "`GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`, `JOB_COMPLETION_INDEX`, `PET_*`, "
        "`TORCHELASTIC_*`, `TORCH_ELASTIC_*`) in `env` or `secrets` are refused.",
        "torchrun",
        shown_default(TrainConfig, "distributed"),
    ),
    Field(
        "workers",
        WORKER_COUNT,
        "Number of worker pods (with torchrun: nodes, one torchrun each).",
        "2",
        shown_default(TrainConfig, "workers"),
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
                shown_default(Resources, "gpu"),
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
                shown_default(Resources, "disk"),
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
        "install-requirements. GitLab's, the cluster's and ci-runner's own credentials "
        "(`CI_JOB_TOKEN`, `GITLAB_TOKEN`, `CI_REGISTRY_PASSWORD`, `KUBECONFIG`, ...) are never "
        "passed, and the project may allow fewer (the component's input `allowed_secrets`).",
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
        "and {job}. On Kubernetes an s3:// location (file:// is for `train --local`), under "
        "one the project allows (the component's input `allowed_outputs`); the comment links "
        "only the objects written there after the run started.",
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
                    "no backreferences, lookarounds, atomic groups, possessive repeats or POSIX "
                    "classes (`[0-9]`, not `[[:digit:]]`), and `\\d`, `\\w`, `\\b` are ASCII; "
                    "the group `value` is the number, optional groups `step` and `rank` (else the "
                    "prefix's rank). Long logs are parsed two to three times faster when the "
                    "pattern starts with fixed text and cannot match a line break: `[^,\\n]+`, "
                    "not `[^,]+`; no `\\s`, `^`, `$`.",
                    r"'loss: (?P<value>[-+0-9.eE]+)'",
                    required=True,
                ),
                Field(
                    "goal",
                    OneOf[Goal]("min", "max"),
                    "Whether lower or higher is better.",
                    "min",
                    shown_default(MetricSpec, "goal"),
                ),
                build=build_metric,
            ),
            doc="mapping name → mapping",
            limit=MAX_METRICS,
        ),
        f"Metrics parsed from the training log, by name (at most {MAX_METRICS}).",
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
        "limit). With `distributed: torchrun` the cluster's limit is the Indexed Job's "
        "activeDeadlineSeconds, which counts from its creation, so it also covers the wait for "
        "nodes and the setup: `setup_timeout` + `unschedulable_timeout` + this limit + 10m (each "
        "pod's own deadline is the same).",
        "2h",
    ),
    Field(
        "elastic",
        Record(
            Field("min_workers", WORKER_COUNT, "Fewest workers.", "1", required=True),
            Field("max_workers", WORKER_COUNT, "Most workers.", "4", required=True),
            build=build_elastic,
        ),
        "Elastic Horovod: keep training with between min_workers and max_workers workers.",
        "{min_workers: 1, max_workers: 4}",
    ),
    Field("kubernetes", KUBERNETES, "Cluster settings.", "{namespace: ml-training}"),
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
    return replace(config, source_file=file, lines=MappingProxyType(dict(context.lines)))


def _in_order(problems: list[Problem]) -> list[Problem]:
    """Problems sorted by line (stable), those without a line last."""
    return sorted(problems, key=lambda problem: problem.line or sys.maxsize)
