"""ci-runner's own variables, read once at the edge (``cli.main``) into typed fields.

Deeper code takes a :class:`Settings` (or one of its parts), never the environment: each
variable is read here, with its default and how its value is spelled, and named by its
constant in :mod:`ci_runner.variables`. The CI context and the project's policy are read at the
same edge, by :func:`ci_runner.context.from_environment` and
:func:`ci_runner.policy.project_policy`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, NewType

from ci_runner import variables
from ci_runner.context import (
    JobTimeVariables,
    cache_dir,
    env_flag,
    gitlab_tokens,
    job_time_variables,
)
from ci_runner.http_policy import GITLAB_BUDGET, TRACKING_BUDGET, budget_seconds
from ci_runner.masking import SecretMasker

# The environment as ci-runner got it, passed on whole and opaque: the processes ``--local``
# starts (pip, horovodrun, the ranks) inherit the user's shell as a pod inherits its image's,
# the CI context and the policy are read from it at the edge, and train.yaml's ``secrets`` (the
# project's names, not ci-runner's) are looked up in it.
ProcessEnvironment = NewType("ProcessEnvironment", Mapping[str, str])

# S3 signs with a region even where it has none (MinIO, Ceph): default to AWS's first.
DEFAULT_AWS_REGION: Final = "us-east-1"


@dataclass(frozen=True)
class MlflowSettings:
    """MLflow's own variables, as ci-runner signs in with them, and the ranks' own token."""

    tracking_uri: str = ""  # spaces around removed; "" when unset
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    insecure_tls: bool = False
    rank_token: str = field(default="", repr=False)  # CI_RUNNER_MLFLOW_TOKEN, spaces removed


@dataclass(frozen=True)
class AwsSettings:
    """AWS's standard variables for S3 (the outputs' links); None: boto3's own chain decides."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str = DEFAULT_AWS_REGION  # AWS_REGION, else AWS_DEFAULT_REGION
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL


@dataclass(frozen=True)
class KubeSettings:
    """Which cluster: the kubeconfig (KUBECONFIG, a list of paths), the context variable, and in
    a pod the service's address (the in-cluster configuration reads it)."""

    kubeconfig: str = ""
    context: str = ""  # KUBE_CONTEXT as written
    service_host: str | None = None
    service_port: str | None = None


@dataclass(frozen=True)
class Settings:
    """Every variable ci-runner reads for itself, each once, into the field that holds it."""

    environ: ProcessEnvironment = field(
        default_factory=lambda: ProcessEnvironment(MappingProxyType({})), repr=False
    )
    # The values of :data:`~ci_runner.variables.SECRET_VARIABLES`: masked wherever ci-runner
    # writes.
    credentials: tuple[str | None, ...] = field(default=(), repr=False)
    # The GitLab API token's variables that are set, as (name, value), in lookup order.
    gitlab_tokens: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    job_token: str | None = field(default=None, repr=False)  # CI_JOB_TOKEN
    git_token: str | None = field(default=None, repr=False)  # CI_RUNNER_GIT_TOKEN
    git_username: str | None = None  # CI_RUNNER_GIT_USERNAME
    allow_git_protocol: bool = False
    allow_forks: bool = False
    notify_result: bool = True
    workers: str | None = None  # a manual run's CI_RUNNER_WORKERS, as written
    extra_args: str | None = None  # and CI_RUNNER_ARGS
    job_time: JobTimeVariables = field(default_factory=lambda: JobTimeVariables("", "", ""))
    gitlab_budget: float = GITLAB_BUDGET  # seconds of GitLab work a phase may spend
    tracking_budget: float = TRACKING_BUDGET  # and of tracking work
    mlflow: MlflowSettings = field(default_factory=MlflowSettings)
    aws: AwsSettings = field(default_factory=AwsSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    path: str = os.defpath  # PATH: where horovodrun is looked for
    cache_dir: Path = field(default_factory=lambda: cache_dir({}))

    @property
    def gitlab_token(self) -> tuple[str, str] | None:
        """The GitLab API token and the variable it came from; None when none is set."""
        return self.gitlab_tokens[0] if self.gitlab_tokens else None

    def masker(self, secret_names: Iterable[str] = ()) -> SecretMasker:
        """A masker for every credential, and the values of ``secret_names`` (train.yaml's
        ``secrets``)."""
        return SecretMasker([*self.credentials, *(self.environ.get(n) for n in secret_names)])


def read_settings(env: Mapping[str, str]) -> Settings:
    """The settings ``env`` gives: the one place ci-runner's own variables are read."""
    get = env.get
    return Settings(
        environ=ProcessEnvironment(MappingProxyType(dict(env))),
        credentials=tuple(get(name) for name in variables.SECRET_VARIABLES),
        gitlab_tokens=tuple(gitlab_tokens(env)),
        job_token=get(variables.CI_JOB_TOKEN),
        git_token=get(variables.CI_RUNNER_GIT_TOKEN),
        git_username=get(variables.CI_RUNNER_GIT_USERNAME),
        allow_git_protocol=env_flag(get(variables.CI_RUNNER_ALLOW_GIT_PROTOCOL), default=False),
        allow_forks=env_flag(get(variables.CI_RUNNER_ALLOW_FORKS), default=False),
        notify_result=env_flag(get(variables.CI_RUNNER_NOTIFY_RESULT), default=True),
        workers=get(variables.CI_RUNNER_WORKERS),
        extra_args=get(variables.CI_RUNNER_ARGS),
        job_time=job_time_variables(env),
        gitlab_budget=budget_seconds(get(variables.CI_RUNNER_GITLAB_TIMEOUT), GITLAB_BUDGET),
        tracking_budget=budget_seconds(get(variables.CI_RUNNER_TRACKING_TIMEOUT), TRACKING_BUDGET),
        mlflow=_mlflow(env),
        aws=_aws(env),
        kube=KubeSettings(
            kubeconfig=get(variables.KUBECONFIG, ""),
            context=get(variables.KUBE_CONTEXT, ""),
            service_host=get(variables.KUBERNETES_SERVICE_HOST),
            service_port=get(variables.KUBERNETES_SERVICE_PORT),
        ),
        path=get(variables.PATH, os.defpath),
        cache_dir=cache_dir(env),
    )


def _mlflow(env: Mapping[str, str]) -> MlflowSettings:
    return MlflowSettings(
        tracking_uri=env.get(variables.MLFLOW_TRACKING_URI, "").strip(),
        token=env.get(variables.MLFLOW_TRACKING_TOKEN) or None,
        username=env.get(variables.MLFLOW_TRACKING_USERNAME) or None,
        password=env.get(variables.MLFLOW_TRACKING_PASSWORD) or None,
        insecure_tls=env_flag(env.get(variables.MLFLOW_TRACKING_INSECURE_TLS), default=False),
        rank_token=env.get(variables.CI_RUNNER_MLFLOW_TOKEN, "").strip(),
    )


def _aws(env: Mapping[str, str]) -> AwsSettings:
    get = env.get
    return AwsSettings(
        access_key_id=get(variables.AWS_ACCESS_KEY_ID) or None,
        secret_access_key=get(variables.AWS_SECRET_ACCESS_KEY) or None,
        session_token=get(variables.AWS_SESSION_TOKEN) or None,
        region=get(variables.AWS_REGION) or get(variables.AWS_DEFAULT_REGION) or DEFAULT_AWS_REGION,
        endpoint_url=get(variables.AWS_ENDPOINT_URL_S3) or get(variables.AWS_ENDPOINT_URL) or None,
    )
