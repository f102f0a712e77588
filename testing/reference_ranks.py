"""What ranks and setup containers see: the one list the README and ``docs/train-yaml.md`` show.

:func:`ranks_environment_markdown` writes it from the code that sets the variables: the names
every rank gets are those :meth:`RunPlan.rank_environment` gives a plan with ``data``,
``outputs`` and a joined MLflow run, the defaults' values are :data:`RANK_DEFAULTS`, the Secret's
tracking keys those of :mod:`ci_runner.plan.tracking`, and the setup containers' variables the
allow-list of :mod:`ci_runner.config.setup_env`. A variable set there and not described here (or
described and no longer set) raises: ``python -m testing.reference_docs`` then fails, and so does
the test that keeps both documents equal to this list.

In testing/, beside the generator, not in ci_runner/: only the generator and its tests use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from ci_runner import variables
from ci_runner.config.setup_env import PIP_SETTINGS, SETUP_ENV
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.plan.run_plan import RANK_DEFAULTS, RankLocation, build_plan, with_tracking
from ci_runner.plan.tracking import PASSWORD_VARIABLE, TOKEN_VARIABLE, RankTracking
from testing.reference_schema import schema_markdown

RANKS_HEADING: Final = "What every rank sees"  # docs/train-yaml.md's, #what-every-rank-sees
# What each variable every rank gets holds, in the order the manifest lists them.
RANK_VARIABLES: Final = {
    variables.CI_RUNNER_SHA: "the commit's full SHA",
    variables.CI_RUNNER_JOB: "the MPIJob's name (with `--local`, the name it would have)",
    variables.CI_RUNNER_PROJECT: "the GitLab project's path (`group/project`)",
    variables.CI_RUNNER_CODE_DIR: "the rank's checkout of the commit, its working directory",
    "DATA_URI": "train.yaml's `data`, when it is set",
    "OUTPUT_URI": (
        "train.yaml's `outputs` with `{project}`, `{sha}` and `{job}` filled in, when it is set"
    ),
    variables.PYTHONPATH: (
        "`env`'s `PYTHONPATH`, when it sets one (with `--local`, after the `PYTHONPATH` "
        "ci-runner runs with, as a pod's is the image's)"
    ),
    "PYTHONUNBUFFERED": "so that the ranks' lines reach the CI log as they are printed",
    "OMPI_MCA_mpi_yield_when_idle": (
        "a rank that waits in MPI, as Horovod's background thread does from `hvd.init()` on, "
        "yields its core instead of spinning on it: OpenMPI only yields when it counts more "
        "ranks than cores, and it counts neither a rank's threads nor a pod's CPU quota"
    ),
}
# With tracking.ranks_log only: the MLflow run the ranks join.
TRACKING_VARIABLES: Final = {
    variables.MLFLOW_TRACKING_URI: "the tracking server (for GitLab, the project's MLflow API)",
    variables.MLFLOW_RUN_ID: "the run ci-runner created for this job",
    variables.MLFLOW_EXPERIMENT_ID: "the run's experiment",
    variables.MLFLOW_TRACKING_USERNAME: "your MLflow server's user, when ci-runner has one",
    variables.MLFLOW_TRACKING_INSECURE_TLS: "`true`, when ci-runner's own says so",
}
TRACKING_SECRET: Final = (TOKEN_VARIABLE, PASSWORD_VARIABLE)
# Not the plan's: where the ranks run puts the virtualenv first (launch.sh on the cluster, the
# local backend here).
PATH_ROW: Final = (
    "| `PATH` | the requirements' virtualenv's `bin` first, so that `python` is the one they are "
    "installed in, then the image's (with `--local`, ci-runner's own) |"
)
SETUP_VARIABLES: Final = {
    variables.CI_RUNNER_REPO_URL: "the project's repository",
    variables.CI_RUNNER_SHA: "the commit",
    variables.CI_RUNNER_GIT_CREDENTIALS: "the directory of the git credential's files",
    variables.CI_RUNNER_REQUIREMENTS: "train.yaml's `requirements`",
    "PIP_CACHE_DIR": "pip's cache",
    variables.CI_RUNNER_VENV_CACHE: "where the virtualenvs are kept, with `pip_cache_pvc` only",
}

# A plan that sets every variable a rank can get.
_CONFIG: Final = TrainConfig(
    name="reference",
    image="image",
    command=("python", "train.py"),
    env=((variables.PYTHONPATH, "src"),),
    data="s3://data/",
    outputs="s3://models/",
)
_CONTEXT: Final = CIContext(sha="0" * 40, project_path="group/project")
_TRACKING: Final = RankTracking(
    uri="https://mlflow.example.com",
    run_id="1",
    experiment_id="1",
    insecure_tls=True,
    username="user",
    credentials={PASSWORD_VARIABLE: "password"},
)


class StaleReference(Exception):
    """A variable is set and not described, or described and no longer set."""


def _checked(described: Iterable[str], names: Sequence[str], what: str) -> None:
    if list(described) != list(names):
        raise StaleReference(
            f"{what}: the code sets {list(names)}, testing/reference_ranks.py describes "
            f"{list(described)}"
        )


def _rank_rows() -> list[str]:
    plan = with_tracking(build_plan(_CONFIG, _CONTEXT), _TRACKING)
    names = [name for name, _ in plan.rank_environment(RankLocation("/code", "/base"))]
    _checked([*RANK_VARIABLES, *TRACKING_VARIABLES], names, "the ranks' variables")
    defaults = dict(RANK_DEFAULTS)
    rows = ["| variable | what it holds |", "| --- | --- |"]
    for name, text in RANK_VARIABLES.items():
        value = f"`{defaults[name]}` unless `env` sets it: " if name in defaults else ""
        rows.append(f"| `{name}` | {value}{text} |")
    rows.append(PATH_ROW)
    rows.append("| train.yaml's `env` | each as written |")
    rows.append("| train.yaml's `secrets` | each from the job's Secret |")
    for name, text in TRACKING_VARIABLES.items():
        rows.append(f"| `{name}` | with `tracking.ranks_log` only: {text} |")
    secret = " or ".join(f"`{n}`" for n in TRACKING_SECRET)
    rows.append(
        f"| {secret} | with `tracking.ranks_log` only, from the job's Secret: the ranks' own "
        "token (`CI_RUNNER_MLFLOW_TOKEN`), or your MLflow server's own token or password |"
    )
    return rows


def _setup_lines() -> list[str]:
    used = [n for names in SETUP_ENV.values() for n in names]
    _checked(SETUP_VARIABLES, list(dict.fromkeys(used)), "the setup containers' variables")
    lines = []
    for container, names in SETUP_ENV.items():
        listed = ", ".join(f"`{n}` ({SETUP_VARIABLES[n]})" for n in names)
        lines.append(f"- `{container}`: {listed}")
    pip = ", ".join(f"`{n}`" for n in PIP_SETTINGS)
    lines[-1] += f", and those of pip's settings that train.yaml's `env` or `secrets` names: {pip}"
    return lines


def ranks_environment_markdown() -> str:
    """The list, in Markdown, without a heading and without links: the same text in the README
    and in docs/train-yaml.md."""
    return "\n".join(
        [
            "Every rank, on the cluster and with `--local` alike, sees these besides"
            " its image's own environment (with `--local`, ci-runner's own, without its "
            "GitLab and MLflow credentials) and what mpirun or horovodrun add (their rank "
            "variables, `NCCL_SOCKET_IFNAME`):",
            "",
            *_rank_rows(),
            "",
            "The setup containers, which run before any rank (each worker's init containers, "
            "and an `elastic` job's launcher's `fetch-code`), get none of `env` and `secrets` "
            "but pip's settings, and only these:",
            "",
            *_setup_lines(),
            "",
        ]
    )


def train_yaml_reference() -> str:
    """``docs/train-yaml.md``: the schema's reference, then this list."""
    return f"{schema_markdown()}\n## {RANKS_HEADING}\n\n{ranks_environment_markdown()}"
