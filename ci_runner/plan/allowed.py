"""A run's plan against the project's policy (:mod:`ci_runner.policy`): which CI variables
train.yaml passes as ``secrets``, where ``outputs`` writes, which claim is the pip cache, and
which Kueue LocalQueue and WorkloadPriorityClass the job names.

Every refusal is a train.yaml problem (file, YAML path, line), raised before anything is
submitted or started; ``validate``, ``render`` and ``train`` check alike.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Final
from urllib.parse import urlsplit

from ci_runner.errors import ConfigError, Problem
from ci_runner.plan.run_plan import RunPlan
from ci_runner.policy import (
    ALLOWED_LOCAL_QUEUES_VARIABLE,
    ALLOWED_OUTPUTS_VARIABLE,
    ALLOWED_PIP_CACHE_CLAIMS_VARIABLE,
    ALLOWED_SECRETS_VARIABLE,
    ALLOWED_WORKLOAD_PRIORITY_CLASSES_VARIABLE,
    NEVER_PASSABLE,
    ProjectPolicy,
)

# Output locations on the CI machine: its files would be listed and linked in the report.
_LOCAL_SCHEMES: Final = ("file", "")


def check_allowed(plan: RunPlan, policy: ProjectPolicy, *, local: bool = False) -> None:
    """Raise ConfigError listing what ``plan`` reaches that ``policy`` does not allow
    (``local``: ``train --local``, where a ``file://`` output is this machine's own)."""
    problems = [
        *_secret_problems(plan, policy),
        *_output_problems(plan, policy, local),
        *_claim_problems(plan, policy),
        *_kueue_problems(plan, policy),
    ]
    if problems:
        raise ConfigError(problems)


def _problem(plan: RunPlan, path: str, message: str, fix: str) -> Problem:
    config = plan.config
    return Problem(config.source_file, path, config.lines.get(path), message, fix)


def _maintainers(variable: str, input_name: str) -> str:
    return (
        f"the project's maintainers allow it in .gitlab-ci.yml (the component's input "
        f"{input_name}, which sets {variable})"
    )


def _secret_problems(plan: RunPlan, policy: ProjectPolicy) -> list[Problem]:
    problems = []
    for index, name in enumerate(plan.config.secrets):
        path = f"secrets[{index}]"
        if name in NEVER_PASSABLE:
            problems.append(
                _problem(
                    plan,
                    path,
                    f"{name} is a GitLab or cluster credential, which no rank may get",
                    "remove it; give the ranks a token of their own, with only the rights they "
                    "need, as a masked CI/CD variable of another name",
                )
            )
        elif policy.allowed_secrets is not None and not any(
            fnmatchcase(name, pattern) for pattern in policy.allowed_secrets
        ):
            problems.append(
                _problem(
                    plan,
                    path,
                    f"{name} is not among the CI variables this project lets train.yaml pass "
                    f"({_shown(policy.allowed_secrets)})",
                    f"remove it, or {_maintainers(ALLOWED_SECRETS_VARIABLE, 'allowed_secrets')}",
                )
            )
    return problems


def _output_problems(plan: RunPlan, policy: ProjectPolicy, local: bool) -> list[Problem]:
    uri = plan.output_uri
    if not uri or local:
        return []  # --local writes where the person at this machine chose (--outputs)
    if urlsplit(uri).scheme in _LOCAL_SCHEMES:
        return [
            _problem(
                plan,
                "outputs",
                f"{uri} is a path on the machine that runs ci-runner, not storage the pods "
                "write to; ci-runner would list that machine's files in the report",
                "write the model to s3://... (a file:// output is for train --local only)",
            )
        ]
    if policy.allowed_outputs is None:
        return []
    segments = urlsplit(uri).path.split("/")
    if "." in segments or ".." in segments:
        return [
            _problem(
                plan,
                "outputs",
                f"{uri} has a '.' or '..' segment, which some S3 servers resolve",
                "write the location without them",
            )
        ]
    if any(uri.startswith(prefix) for prefix in policy.allowed_outputs):
        return []
    return [
        _problem(
            plan,
            "outputs",
            f"{uri} is not under a location this project allows ({_shown(policy.allowed_outputs)})",
            "write under one of them, or "
            + _maintainers(ALLOWED_OUTPUTS_VARIABLE, "allowed_outputs"),
        )
    ]


def _claim_problems(plan: RunPlan, policy: ProjectPolicy) -> list[Problem]:
    claim = plan.config.kubernetes.pip_cache_pvc
    allowed = policy.allowed_pip_cache_claims
    if claim is None or allowed is None or any(fnmatchcase(claim, p) for p in allowed):
        return []
    return [
        _problem(
            plan,
            "kubernetes.pip_cache_pvc",
            f"claim {claim} is not one this project lets train.yaml use as the pip cache "
            f"({_shown(allowed)})",
            "remove pip_cache_pvc, or "
            + _maintainers(ALLOWED_PIP_CACHE_CLAIMS_VARIABLE, "allowed_pip_cache_claims"),
        )
    ]


def _kueue_problems(plan: RunPlan, policy: ProjectPolicy) -> list[Problem]:
    k8s = plan.config.kubernetes
    return [
        *_name_problems(
            plan,
            "local_queue",
            "LocalQueue",
            k8s.local_queue,
            policy.allowed_local_queues,
            _maintainers(ALLOWED_LOCAL_QUEUES_VARIABLE, "allowed_local_queues"),
        ),
        *_name_problems(
            plan,
            "workload_priority_class",
            "WorkloadPriorityClass",
            k8s.workload_priority_class,
            policy.allowed_workload_priority_classes,
            _maintainers(
                ALLOWED_WORKLOAD_PRIORITY_CLASSES_VARIABLE, "allowed_workload_priority_classes"
            ),
        ),
    ]


def _name_problems(
    plan: RunPlan,
    field: str,
    kind: str,
    name: str | None,
    allowed: tuple[str, ...] | None,
    maintainers: str,
) -> list[Problem]:
    """``kubernetes.<field>``'s ``name`` (a Kueue object's) against the project's ``allowed``."""
    if name is None or allowed is None or any(fnmatchcase(name, p) for p in allowed):
        return []
    instead = "name one of them" if allowed else f"remove {field}"
    return [
        _problem(
            plan,
            f"kubernetes.{field}",
            f"{kind} {name} is not one this project lets train.yaml use ({_shown(allowed)})",
            f"{instead}, or {maintainers}",
        )
    ]


def _shown(items: tuple[str, ...]) -> str:
    return "allowed: " + ", ".join(items) if items else "none is allowed"
