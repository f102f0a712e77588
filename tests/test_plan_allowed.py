"""A plan against the project's policy: each refusal's exact line, and what passes."""

from __future__ import annotations

import pytest

from ci_runner.config.schema import load_config
from ci_runner.errors import ConfigError
from ci_runner.plan.allowed import check_allowed
from ci_runner.plan.run_plan import RunPlan, build_plan
from ci_runner.policy import ProjectPolicy
from ci_runner.settings import read_settings
from testing.config_cases import BASE
from testing.plan_cases import CONTEXT

ALLOW_ALL = ProjectPolicy()


def plan(extra: str, output_uri: str | None = None) -> RunPlan:
    config = load_config(BASE + extra, "ml/train.yaml")
    return build_plan(config, CONTEXT, read_settings({}), output_uri=output_uri)


def refusals(extra: str, policy: ProjectPolicy = ALLOW_ALL, *, local: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        check_allowed(plan(extra), policy, local=local)
    return raised.value.lines()


@pytest.mark.parametrize("name", ["GITLAB_TOKEN", "CI_JOB_TOKEN", "CI_REGISTRY_PASSWORD"])
def test_gitlab_s_tokens_are_never_passed_by_default(name: str) -> None:
    assert refusals(f"secrets: [WANDB_API_KEY, {name}]\n") == [
        f"ml/train.yaml:4: secrets[1]: {name} is a GitLab or cluster credential, which no rank "
        "may get; fix: remove it; give the ranks a token of their own, with only the rights they "
        "need, as a masked CI/CD variable of another name"
    ]


def test_even_a_project_that_allows_every_name_never_passes_them() -> None:
    policy = ProjectPolicy(allowed_secrets=("*",))
    assert len(refusals("secrets:\n  - KUBECONFIG\n  - CI_DEPLOY_PASSWORD\n", policy)) == 2


def test_the_project_narrows_the_secrets_with_wildcards() -> None:
    policy = ProjectPolicy(allowed_secrets=("WANDB_*", "HF_TOKEN"))
    check_allowed(plan("secrets: [WANDB_API_KEY, HF_TOKEN]\n"), policy)
    assert refusals("secrets: [WANDB_API_KEY, AWS_SECRET_ACCESS_KEY]\n", policy) == [
        "ml/train.yaml:4: secrets[1]: AWS_SECRET_ACCESS_KEY is not among the CI variables this "
        "project lets train.yaml pass (allowed: WANDB_*, HF_TOKEN); fix: remove it, or the "
        "project's maintainers allow it in .gitlab-ci.yml (the component's input allowed_secrets, "
        "which sets CI_RUNNER_ALLOWED_SECRETS)"
    ]


def test_a_project_that_allows_none_says_so() -> None:
    policy = ProjectPolicy(allowed_secrets=())
    assert refusals("secrets: [WANDB_API_KEY]\n", policy)[0].startswith(
        "ml/train.yaml:4: secrets[0]: WANDB_API_KEY is not among the CI variables this project "
        "lets train.yaml pass (none is allowed); fix:"
    )


def test_a_file_output_is_for_local_runs_only() -> None:
    outputs = "file:///etc/ssh/"
    assert refusals(f"outputs: {outputs}\n") == [
        f"ml/train.yaml:4: outputs: {outputs} is a path on the machine that runs ci-runner, not "
        "storage the pods write to; ci-runner would list that machine's files in the report; "
        "fix: write the model to s3://... (a file:// output is for train --local only)"
    ]
    check_allowed(plan(f"outputs: {outputs}\n"), ALLOW_ALL, local=True)


def test_outputs_only_under_the_locations_the_project_allows() -> None:
    policy = ProjectPolicy(allowed_outputs=("s3://models/team-a/",))
    check_allowed(plan("outputs: s3://models/team-a/{sha}/\n"), policy)
    assert refusals("outputs: s3://other-teams-bucket/private/\n", policy) == [
        "ml/train.yaml:4: outputs: s3://other-teams-bucket/private/ is not under a location this "
        "project allows (allowed: s3://models/team-a/); fix: write under one of them, or the "
        "project's maintainers allow it in .gitlab-ci.yml (the component's input "
        "allowed_outputs, which sets CI_RUNNER_ALLOWED_OUTPUTS)"
    ]


def test_a_dot_segment_cannot_climb_out_of_an_allowed_prefix() -> None:
    policy = ProjectPolicy(allowed_outputs=("s3://models/team-a/",))
    assert refusals("outputs: s3://models/team-a/../team-b/\n", policy) == [
        "ml/train.yaml:4: outputs: s3://models/team-a/../team-b/ has a '.' or '..' segment, "
        "which some S3 servers resolve; fix: write the location without them"
    ]


def test_the_pip_cache_claim_must_be_one_the_project_allows() -> None:
    policy = ProjectPolicy(allowed_pip_cache_claims=("pip-cache-*",))
    check_allowed(plan("kubernetes: {pip_cache_pvc: pip-cache-ml}\n"), policy)
    assert refusals("kubernetes:\n  pip_cache_pvc: team-b-data\n", policy) == [
        "ml/train.yaml:5: kubernetes.pip_cache_pvc: claim team-b-data is not one this project "
        "lets train.yaml use as the pip cache (allowed: pip-cache-*); fix: remove "
        "pip_cache_pvc, or the project's maintainers allow it in .gitlab-ci.yml (the "
        "component's input allowed_pip_cache_claims, which sets "
        "CI_RUNNER_ALLOWED_PIP_CACHE_CLAIMS)"
    ]


KUEUE = "kubernetes:\n  local_queue: {queue}\n  workload_priority_class: {priority}\n"


def test_the_local_queue_must_be_one_the_project_allows() -> None:
    policy = ProjectPolicy(allowed_local_queues=("team-a", "team-a-?"))
    check_allowed(plan(KUEUE.format(queue="team-a-2", priority="low")), policy)
    assert refusals(KUEUE.format(queue="team-b", priority="low"), policy) == [
        "ml/train.yaml:5: kubernetes.local_queue: LocalQueue team-b is not one this project lets "
        "train.yaml use (allowed: team-a, team-a-?); fix: name one of them, or the project's "
        "maintainers allow it in .gitlab-ci.yml (the component's input allowed_local_queues, "
        "which sets CI_RUNNER_ALLOWED_LOCAL_QUEUES)"
    ]


def test_a_project_that_allows_no_local_queue_says_to_remove_it() -> None:
    policy = ProjectPolicy(allowed_local_queues=())
    check_allowed(plan(""), policy)
    assert refusals("kubernetes: {local_queue: team-a}\n", policy) == [
        "ml/train.yaml:4: kubernetes.local_queue: LocalQueue team-a is not one this project lets "
        "train.yaml use (none is allowed); fix: remove local_queue, or the project's maintainers "
        "allow it in .gitlab-ci.yml (the component's input allowed_local_queues, which sets "
        "CI_RUNNER_ALLOWED_LOCAL_QUEUES)"
    ]


def test_the_workload_priority_class_must_be_one_the_project_allows() -> None:
    policy = ProjectPolicy(allowed_workload_priority_classes=("low", "batch-*"))
    check_allowed(plan(KUEUE.format(queue="team-a", priority="batch-low")), policy)
    check_allowed(plan("kubernetes: {local_queue: team-a}\n"), policy)  # no class: Kueue's own
    assert refusals(KUEUE.format(queue="team-a", priority="urgent"), policy) == [
        "ml/train.yaml:6: kubernetes.workload_priority_class: WorkloadPriorityClass urgent is not "
        "one this project lets train.yaml use (allowed: low, batch-*); fix: name one of them, or "
        "the project's maintainers allow it in .gitlab-ci.yml (the component's input "
        "allowed_workload_priority_classes, which sets "
        "CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES)"
    ]


def test_a_project_that_allows_no_workload_priority_class_says_to_remove_it() -> None:
    policy = ProjectPolicy(allowed_workload_priority_classes=())
    assert refusals(KUEUE.format(queue="team-a", priority="low"), policy) == [
        "ml/train.yaml:6: kubernetes.workload_priority_class: WorkloadPriorityClass low is not one "
        "this project lets train.yaml use (none is allowed); fix: remove workload_priority_class, "
        "or the project's maintainers allow it in .gitlab-ci.yml (the component's input "
        "allowed_workload_priority_classes, which sets "
        "CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES)"
    ]


def test_the_kueue_names_match_the_whole_name() -> None:
    policy = ProjectPolicy(
        allowed_local_queues=("team-a",), allowed_workload_priority_classes=("low",)
    )
    lines = refusals(KUEUE.format(queue="team-a-b", priority="lower"), policy)
    assert [line.split(": ", 2)[1] for line in lines] == [
        "kubernetes.local_queue",
        "kubernetes.workload_priority_class",
    ]


def test_every_refusal_is_listed_at_once() -> None:
    policy = ProjectPolicy(
        allowed_outputs=("s3://aaa/",),
        allowed_pip_cache_claims=(),
        allowed_local_queues=("team-a",),
        allowed_workload_priority_classes=("low",),
    )
    lines = refusals(
        "secrets: [GITLAB_TOKEN]\noutputs: s3://bbb/\nkubernetes: {pip_cache_pvc: c, "
        "local_queue: team-b, workload_priority_class: high}\n",
        policy,
    )
    assert [line.split(": ", 2)[1] for line in lines] == [
        "secrets[0]",
        "outputs",
        "kubernetes.pip_cache_pvc",
        "kubernetes.local_queue",
        "kubernetes.workload_priority_class",
    ]
