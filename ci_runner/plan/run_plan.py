"""The run plan: what a run is, computed once from train.yaml, the CI context and the environment.

Rendering, both backends, ``cancel`` and the report read the plan; none of them derives a name,
a URI, an environment variable or a command line of its own. Where the ranks run changes only
the code directory, where the job's requirements are importable from (:class:`RankLocation`) and
how horovodrun finds the hosts (:class:`Hosts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Final

from ci_runner import variables
from ci_runner.config.outputs import expand_outputs
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, Problem
from ci_runner.masking import SecretMasker
from ci_runner.plan.deadline import CIJobTime, mpijob_deadline
from ci_runner.plan.mpijob_name import mpijob_name
from ci_runner.plan.tracking import SET_FOR_RANKS, RankTracking, give_way
from ci_runner.policy import ProjectPolicy
from ci_runner.settings import Settings
from ci_runner.torchrun_output import TEE_BOTH

LOG_NAME: Final = "train.log"  # the training log, in the output directory
GIT_USERNAME_KEY: Final = "GIT_USERNAME"
GIT_PASSWORD_KEY: Final = "GIT_PASSWORD"
# The rank variables whose values depend on where the ranks run (PATH only exists locally:
# on Kubernetes it is the image's).
LOCATION_DEPENDENT: Final = frozenset({variables.CI_RUNNER_CODE_DIR, variables.PYTHONPATH, "PATH"})
# What horovodrun 0.28.1 gives OpenMPI's mpirun (runner/mpi_run.py: basic_args, _NO_BINDING_ARGS,
# _OMPI_FLAGS): rank-tagged output lines ([1,0]<stdout>:), one rank per slot, no core binding,
# TCP between the ranks.
MPIRUN_OUTPUT: Final = ("--tag-output",)
# mpirun refuses to run as root without it; only an image that runs as root needs it.
MPIRUN_AS_ROOT: Final = "--allow-run-as-root"
MPIRUN_PLACEMENT: Final = ("-bind-to", "none", "-map-by", "slot")
MPIRUN_TRANSPORT: Final = ("-mca", "pml", "ob1", "-mca", "btl", "^openib")
# OpenMPI's mpirun takes every word after "--" as the program and its arguments (4.1's
# opal/util/cmd_line.c, opal_cmd_line_parse: "--" moves the rest to the tail unparsed), so the
# job's command can never become mpirun's options. horovodrun has none: its argparse REMAINDER
# keeps a "--" as the command's first word; validation refuses a command starting with "-".
MPIRUN_END_OF_OPTIONS: Final = "--"
# What every rank gets unless train.yaml's env sets it. PYTHONUNBUFFERED: the ranks' lines reach
# the CI log as they happen. OpenMPI's yield: a rank waiting in MPI (Horovod's background thread
# negotiates every few milliseconds from hvd.init on) spins on its core unless OpenMPI counts more
# ranks than cores, and it counts neither a rank's own threads nor a pod's CPU quota: the spin then
# takes the CPU the rank's main thread needs (importing torch, building the optimizer: 1.3 s of
# a two-rank job's first step).
RANK_DEFAULTS: Final = (("PYTHONUNBUFFERED", "1"), ("OMPI_MCA_mpi_yield_when_idle", "1"))
# torchrun as a module of the Python that runs the ranks (no console script needed on the PATH).
TORCHRUN: Final = ("-m", "torch.distributed.run")
# The port node 0's torchrun serves the static rendezvous (its TCPStore) on: the headless
# Service's port too.
TORCHRUN_PORT: Final = 29500
# torch's own static rendezvous timeout (seconds), the least a node waits for the others.
RENDEZVOUS_TIMEOUT: Final = 600


def secret_name(job: str) -> str:
    """The Secret holding the job's git credentials and train.yaml ``secrets``."""
    return f"{job}-secrets"


@dataclass(frozen=True)
class JobSecret:
    """The job's Secret: its name, its keys, and their values (None when they were not read:
    ``render``, ``validate`` and ``cancel`` need only the names)."""

    name: str
    keys: tuple[str, ...]
    data: Mapping[str, str] | None = field(default=None, repr=False)

    def values(self) -> Mapping[str, str]:
        """The data, for a run; a plan built without an environment has none."""
        if self.data is None:
            raise ValueError(f"the values of Secret {self.name} were not read from the environment")
        return self.data


@dataclass(frozen=True)
class RankLocation:
    """Where the ranks run, as their environment says it."""

    code_dir: str  # the commit's checkout, the ranks' working directory
    dependency_path: str  # PYTHONPATH before train.yaml's own: the requirements, or the base


@dataclass(frozen=True)
class Hosts:
    """How horovodrun finds the hosts: the part of its command line that depends on where."""

    fixed: tuple[str, ...]  # a fixed-size job's hosts, e.g. ("--hostfile", "/etc/mpi/hostfile")
    discovery_script: str  # an elastic job's host discovery script
    controller: tuple[str, ...] = ()  # e.g. ("--gloo",) where ranks talk without MPI


@dataclass(frozen=True)
class OutputPaths:
    """Where a run keeps its files: the directory the CI job saves as artifacts."""

    out_dir: Path  # absolute
    artifacts_path: str  # as given: relative to the project directory in CI

    @property
    def log_path(self) -> Path:
        return self.out_dir / LOG_NAME


@dataclass(frozen=True)
class RunPlan:
    """Everything a run derives from train.yaml, the CI context and the environment."""

    config: TrainConfig
    context: CIContext
    mpijob_name: str
    data_uri: str | None  # DATA_URI for the ranks
    output_uri: str | None  # OUTPUT_URI for the ranks, expanded
    secret: JobSecret
    masker: SecretMasker = field(repr=False)
    outputs: OutputPaths | None = None  # None for commands that write no files
    tracking: RankTracking | None = None  # the MLflow run the ranks join (plan.tracking)
    ci_job: CIJobTime | None = None  # the CI job's timeout and time spent (plan.deadline)
    # Whether the pods' fetch sends a git token (the Secret's GIT_PASSWORD is not empty), and
    # whether the project allows git:// (context.ALLOW_GIT_PROTOCOL): what the URL may be.
    git_credential: bool = False
    git_protocol: bool = False
    # The maintainers' choices: the image the git fetch runs in, the cache of protected refs.
    policy: ProjectPolicy = field(default_factory=ProjectPolicy)

    @property
    def deadline_seconds(self) -> int | None:
        """The MPIJob's ``activeDeadlineSeconds``: train.yaml's ``timeout``, else what the CI
        job's own timeout leaves for training."""
        return mpijob_deadline(self.config.timeout, self.ci_job)

    @property
    def secret_names(self) -> tuple[str, ...]:
        """train.yaml's ``secrets`` (and the tracking credentials): every rank gets each as a
        variable of that name."""
        if self.tracking is None:
            return self.config.secrets
        return give_way(self.config.secrets, self.tracking)

    def rank_environment(self, location: RankLocation) -> tuple[tuple[str, str], ...]:
        """The variables every rank gets besides the secrets, in the order the manifest lists
        them; train.yaml's ``env`` wins over ``RANK_DEFAULTS`` and extends ``PYTHONPATH``."""
        config, ctx = self.config, self.context
        user = dict(config.env)
        env = [
            (variables.CI_RUNNER_SHA, ctx.sha),
            (variables.CI_RUNNER_JOB, self.mpijob_name),
            (variables.CI_RUNNER_PROJECT, ctx.project_path),
            (variables.CI_RUNNER_CODE_DIR, location.code_dir),
        ]
        if self.data_uri:
            env.append(("DATA_URI", self.data_uri))
        if self.output_uri:
            env.append(("OUTPUT_URI", self.output_uri))
        paths = [p for p in (location.dependency_path, user.get(variables.PYTHONPATH)) if p]
        if paths:
            env.append((variables.PYTHONPATH, ":".join(paths)))
        env += [(k, v) for k, v in RANK_DEFAULTS if k not in user]
        taken = {variables.PYTHONPATH} | (SET_FOR_RANKS if self.tracking else set())
        env += [(k, v) for k, v in config.env if k not in taken]
        if self.tracking is not None:
            env += self.tracking.variables()
        return tuple(env)

    def horovodrun_argv(self, hosts: Hosts, program: str = "horovodrun") -> list[str]:
        """``horovodrun`` for every rank on ``hosts``, then the job's command."""
        config = self.config
        slots = config.slots_per_worker
        argv = [program, "-np", str(config.ranks)]
        if config.elastic:
            if not hosts.discovery_script:
                raise ValueError("an elastic job needs a host discovery script")
            argv += [
                "--min-np",
                str(config.elastic.min_workers * slots),
                "--max-np",
                str(config.elastic.max_workers * slots),
                # Used for hosts the script lists without a slot count (horovod
                # runner/elastic/discovery.py: "host:slots" lines override it).
                "--slots",
                str(slots),
                "--host-discovery-script",
                hosts.discovery_script,
            ]
        else:
            argv += hosts.fixed
        return [*argv, *hosts.controller, *config.command]

    def mpirun_argv(self, hosts: Hosts) -> list[str]:
        """OpenMPI's ``mpirun`` for every rank of a fixed-size job on ``hosts``, then the job's
        command: the command horovodrun (0.28.1, ``runner/mpi_run.py``) would run, without its
        checks before it (as Horovod's docs start the ranks under the MPI Operator). Where it runs
        adds what depends on the pod: the interface and each variable to pass (launch.sh)."""
        if self.config.elastic:
            raise ValueError("an elastic job needs horovodrun's elastic driver")
        if hosts.controller:
            raise ValueError(
                f"mpirun starts MPI ranks; {' '.join(hosts.controller)} needs horovodrun"
            )
        ranks = ["-np", str(self.config.ranks), *hosts.fixed]
        as_root = [MPIRUN_AS_ROOT] if self.config.kubernetes.run_as_user is None else []
        options = [*as_root, *MPIRUN_OUTPUT, *ranks, *MPIRUN_PLACEMENT, *MPIRUN_TRANSPORT]
        return ["mpirun", *options, MPIRUN_END_OF_OPTIONS, *self.config.command]

    def torchrun_argv(
        self, *, standalone: bool = False, python: str = "python", log_dir: str | None = None
    ) -> list[str]:
        """``python -m torch.distributed.run`` for every rank, then the job's command.

        On Kubernetes (one torchrun a node, ``workers`` nodes of ``slots_per_worker`` processes)
        the static rendezvous on node 0's :data:`TORCHRUN_PORT`: the node's rank and node 0's
        address are the pod's, which torchrun.sh adds. Its timeout (600 s in torch's
        static_tcp_rendezvous.py) is at least what the nodes may spend waiting for a node and
        setting up, which ci-runner bounds itself: a node that sets up later than the others is
        waited for, not failed. ``standalone``: every rank here (``--local``). Each rank's lines
        are teed; their rank prefix comes from torchrun's environment (:data:`TORCHRUN_ENVIRONMENT`,
        torch 2.13 has no option for it); ``log_dir``: where torchrun copies them (else a
        ``/tmp/torchelastic_*`` it never removes). ``--no-python``: the command is run as it is,
        and "--" ends torchrun's options, so no word of it is one."""
        config = self.config
        if standalone:
            where = ["--standalone", "--nproc-per-node", str(config.ranks)]
        else:
            k8s = config.kubernetes
            waited = max(RENDEZVOUS_TIMEOUT, k8s.setup_timeout + k8s.unschedulable_timeout)
            where = [
                *("--nnodes", str(config.workers)),
                *("--nproc-per-node", str(config.slots_per_worker)),
                *("--rdzv-backend", "static"),
                *("--rdzv-conf", f"timeout={waited}"),
                *("--master-port", str(TORCHRUN_PORT)),
            ]
        output = ["--tee", TEE_BOTH, *(("--log-dir", log_dir) if log_dir else ())]
        return [python, *TORCHRUN, *where, *output, "--no-python", "--", *config.command]


def with_tracking(plan: RunPlan, tracking: RankTracking) -> RunPlan:
    """``plan`` whose ranks join ``tracking``'s run: its credentials become keys of the job's
    Secret (a train.yaml secret ci-runner sets for the ranks gives way: ``give_way``)."""
    secret = plan.secret
    keys = give_way(secret.keys, tracking)
    data = None
    if secret.data is not None:
        values = {**secret.data, **tracking.credentials}
        data = MappingProxyType({k: values[k] for k in keys})
    secret = replace(secret, keys=keys, data=data)
    masker = plan.masker.with_secrets(tracking.credentials.values())
    return replace(plan, tracking=tracking, secret=secret, masker=masker)


def build_plan(
    config: TrainConfig,
    context: CIContext,
    settings: Settings | None = None,
    *,
    read_secrets: bool = False,
    data_uri: str | None = None,
    output_uri: str | None = None,
    outputs: OutputPaths | None = None,
    ci_job: CIJobTime | None = None,
    masker: SecretMasker | None = None,
    policy: ProjectPolicy | None = None,
) -> RunPlan:
    """The plan for running ``config`` at ``context`` with ``settings``.

    The masker masks every credential in ``settings`` and the secrets' values. ``read_secrets``
    reads the Secret's values from its environment (a run needs them; ``render``, ``validate`` and
    ``cancel`` only the names). ``data_uri`` and ``output_uri`` replace train.yaml's ``data`` and
    ``outputs`` (taken as is, no {fields}). Raises ConfigError, when reading them, for every
    secret that is not set: before anything is submitted or started. The names ci-runner sets
    itself the config refuses (:func:`ci_runner.config.schema.load_config`). A command passes
    its console's ``masker`` (built from the same environment and secrets): one masker for the
    lines ci-runner prints and everything the run writes. ``policy`` is the maintainers' (else
    none narrows); :func:`ci_runner.plan.allowed.check_allowed` checks the plan against it.
    """
    settings = settings or Settings()
    name = mpijob_name(config, context)
    if output_uri is None and config.outputs:
        output_uri = expand_outputs(
            config.outputs, project=context.project_path, sha=context.sha, job=name
        )
    keys = (GIT_USERNAME_KEY, GIT_PASSWORD_KEY, *config.secrets)
    data = MappingProxyType(_secret_data(config, settings)) if read_secrets else None
    return RunPlan(
        config=config,
        context=context,
        mpijob_name=name,
        data_uri=data_uri or config.data,
        output_uri=output_uri,
        secret=JobSecret(secret_name(name), keys, data),
        masker=masker or settings.masker(config.secrets),
        outputs=outputs,
        ci_job=ci_job,
        git_credential=bool(settings.git_token or settings.job_token),
        git_protocol=settings.allow_git_protocol,
        policy=policy or ProjectPolicy(),
    )


def _secret_data(config: TrainConfig, settings: Settings) -> dict[str, str]:
    """Git credentials for the pods, then one key per ``config.secrets``.

    Git uses ``CI_RUNNER_GIT_TOKEN`` (user ``CI_RUNNER_GIT_USERNAME``, default ``oauth2``) when
    set, else the job token as ``gitlab-ci-token``.
    """
    if settings.git_token:
        data = {
            GIT_USERNAME_KEY: settings.git_username or "oauth2",
            GIT_PASSWORD_KEY: settings.git_token,
        }
    else:
        data = {
            GIT_USERNAME_KEY: "gitlab-ci-token",
            GIT_PASSWORD_KEY: settings.job_token or "",
        }
    problems = []
    for name in config.secrets:
        value = settings.environ.get(name)
        if not value:
            problems.append(
                Problem(
                    config.source_file,
                    "secrets",
                    None,
                    f"CI variable {name} is not set",
                    f"define {name} as a masked variable in the project's Settings > CI/CD > "
                    "Variables (or export it when running outside CI)",
                )
            )
        else:
            data[name] = value
    if problems:
        raise ConfigError(problems)
    return data
