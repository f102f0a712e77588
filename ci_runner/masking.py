"""Which values are secrets: masked in the CI log, the saved log, reports, errors and crash logs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

MASK: Final = "[MASKED]"
# Values shorter than this are not masked: masking "1" or "ab" would shred every log line.
MIN_SECRET_LENGTH: Final = 4

# GitLab credentials in the CI job's environment. Pods never get them, so neither do ranks on
# this machine (unless train.yaml lists one under `secrets`). CI_REPOSITORY_URL embeds the job
# token.
GITLAB_CREDENTIALS: Final = (
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
SECRET_VARIABLES: Final = (
    *GITLAB_CREDENTIALS,
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "MLFLOW_TRACKING_TOKEN",  # ci_runner.tracking: MLflow's own variables
    "MLFLOW_TRACKING_PASSWORD",
    "CI_RUNNER_MLFLOW_TOKEN",  # the ranks' own (train.yaml's tracking.ranks_log)
)


def secret_masker(env: Mapping[str, str], secret_names: Iterable[str] = ()) -> SecretMasker:
    """A masker for every credential in ``env``, and the values of ``secret_names`` (train.yaml's
    ``secrets``)."""
    names = (*SECRET_VARIABLES, *secret_names)
    return SecretMasker(env.get(name) for name in names)


class SecretMasker:
    """Replaces every known secret value with ``[MASKED]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values = sorted(
            {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True
        )
        self._values = tuple(values)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    @property
    def values(self) -> tuple[str, ...]:
        """The values masked, longest first."""
        return self._values

    @property
    def longest(self) -> int:
        """Length of the longest secret (0 when there are none)."""
        return len(self._values[0]) if self._values else 0

    def mask(self, text: str) -> str:
        """``text`` with every secret value replaced."""
        # A substring test per value is a fast scan; the alternation tries every position.
        if self._pattern is None or not any(value in text for value in self._values):
            return text
        return self._pattern.sub(MASK, text)

    def with_secrets(self, more: Iterable[str | None]) -> SecretMasker:
        """A masker that also masks ``more``."""
        return SecretMasker([*self._values, *more])
