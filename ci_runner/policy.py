"""What the project's maintainers allow a branch's train.yaml to reach, read at the edge.

train.yaml is written by whoever pushes a branch; ``.gitlab-ci.yml`` (the component's inputs,
which set the variables below) and protected CI/CD variables are the maintainers'. This module
reads their choices once into a :class:`ProjectPolicy`; :mod:`ci_runner.plan.allowed` checks a
train.yaml against it. Nothing in train.yaml can widen it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ci_runner import variables

# The image the pods' git fetch runs in: the maintainers' choice, never train.yaml's image,
# which would see the git credential. GitLab names the CI job's own image in CI_JOB_IMAGE:
# ci-runner's image, which has git (ci-runner reads the commit with it).
SETUP_IMAGE_VARIABLE: Final = variables.CI_RUNNER_SETUP_IMAGE
JOB_IMAGE_VARIABLE: Final = variables.CI_JOB_IMAGE
# Narrowing lists, each a comma- or space-separated list: unset or empty, no narrowing; the one
# word ``none``, nothing.
# Secret names (* and ? as wildcards), URI prefixes, then claim, Kueue LocalQueue and Kueue
# WorkloadPriorityClass names (* and ? as wildcards).
ALLOWED_SECRETS_VARIABLE: Final = variables.CI_RUNNER_ALLOWED_SECRETS
ALLOWED_OUTPUTS_VARIABLE: Final = variables.CI_RUNNER_ALLOWED_OUTPUTS
ALLOWED_PIP_CACHE_CLAIMS_VARIABLE: Final = variables.CI_RUNNER_ALLOWED_PIP_CACHE_CLAIMS
ALLOWED_LOCAL_QUEUES_VARIABLE: Final = variables.CI_RUNNER_ALLOWED_LOCAL_QUEUES
# A branch choosing a high WorkloadPriorityClass could preempt other teams' trainings.
ALLOWED_WORKLOAD_PRIORITY_CLASSES_VARIABLE: Final = (
    variables.CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES
)
# "true" for a protected branch or tag (GitLab's predefined variable).
REF_PROTECTED_VARIABLE: Final = variables.CI_COMMIT_REF_PROTECTED

# CI variables no train.yaml may pass to the ranks, whatever the project allows: GitLab's
# credentials (the job's, the registry's, the dependency proxy's, a deploy token's, the ID
# tokens of old), ci-runner's own, and the cluster's (KUBECONFIG, a file variable).
NEVER_PASSABLE: Final = frozenset(
    {
        *variables.GITLAB_CREDENTIALS,
        variables.CI_DEPLOY_PASSWORD,
        variables.CI_JOB_JWT,
        variables.CI_JOB_JWT_V1,
        variables.CI_JOB_JWT_V2,
        variables.KUBECONFIG,
    }
)
_LIST_SEPARATOR: Final = re.compile(r"[,\s]+")
NOTHING: Final = "none"


@dataclass(frozen=True)
class ProjectPolicy:
    """The maintainers' choices for this run: each narrowing list is None when unset."""

    setup_image: str | None = None
    allowed_secrets: tuple[str, ...] | None = None
    allowed_outputs: tuple[str, ...] | None = None
    allowed_pip_cache_claims: tuple[str, ...] | None = None
    allowed_local_queues: tuple[str, ...] | None = None
    allowed_workload_priority_classes: tuple[str, ...] | None = None
    ref_protected: bool = False


def project_policy(env: Mapping[str, str], *, setup_image: str | None = None) -> ProjectPolicy:
    """The policy ``env`` sets; ``setup_image`` (``--setup-image``) wins over the variables."""
    image = setup_image or env.get(SETUP_IMAGE_VARIABLE, "").strip()
    image = image or env.get(JOB_IMAGE_VARIABLE, "").strip()
    return ProjectPolicy(
        setup_image=image or None,
        allowed_secrets=_list(env, ALLOWED_SECRETS_VARIABLE),
        allowed_outputs=_list(env, ALLOWED_OUTPUTS_VARIABLE),
        allowed_pip_cache_claims=_list(env, ALLOWED_PIP_CACHE_CLAIMS_VARIABLE),
        allowed_local_queues=_list(env, ALLOWED_LOCAL_QUEUES_VARIABLE),
        allowed_workload_priority_classes=_list(env, ALLOWED_WORKLOAD_PRIORITY_CLASSES_VARIABLE),
        ref_protected=env.get(REF_PROTECTED_VARIABLE, "").strip().lower() == "true",
    )


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    items = tuple(item for item in _LIST_SEPARATOR.split(env.get(name, "").strip()) if item)
    if not items:
        return None
    return () if items == (NOTHING,) else items
