"""Which values are secrets: masked in the CI log, the saved log, reports, errors and crash logs."""

from __future__ import annotations

from collections.abc import Mapping

from ci_runner.config_types import TrainConfig
from ci_runner.logsink import SecretMasker

# GitLab credentials in the CI job's environment. Pods never get them, so neither do ranks on
# this machine (unless train.yaml lists one under `secrets`). CI_REPOSITORY_URL embeds the job
# token.
GITLAB_CREDENTIALS = (
    "CI_JOB_TOKEN",
    "CI_RUNNER_GIT_TOKEN",
    "CI_RUNNER_GITLAB_TOKEN",
    "GITLAB_TOKEN",
    "CI_REGISTRY_PASSWORD",
    "CI_DEPENDENCY_PROXY_PASSWORD",
    "CI_REPOSITORY_URL",
)
# Every variable whose value is masked wherever ci-runner writes: GitLab's, and the S3 secret
# (ranks do get that one: they read data from and write models to S3).
SECRET_VARIABLES = (*GITLAB_CREDENTIALS, "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def secret_masker(env: Mapping[str, str], config: TrainConfig | None = None) -> SecretMasker:
    """A masker for every credential in ``env``, and the values of train.yaml's ``secrets``."""
    names = (*SECRET_VARIABLES, *(config.secrets if config else ()))
    return SecretMasker(env.get(name) for name in names)
