"""The project's policy read from the environment: the setup image, the narrowing lists."""

from __future__ import annotations

import pytest

from ci_runner.policy import NEVER_PASSABLE, ProjectPolicy, project_policy


def test_nothing_set_narrows_nothing_and_names_no_setup_image() -> None:
    assert project_policy({}) == ProjectPolicy()


def test_the_ci_job_s_own_image_is_the_default_setup_image() -> None:
    env = {"CI_JOB_IMAGE": "registry.example.com/g/ci-runner:1.2.0"}
    assert project_policy(env).setup_image == "registry.example.com/g/ci-runner:1.2.0"


def test_the_input_wins_over_the_job_image_and_the_flag_over_both() -> None:
    env = {"CI_JOB_IMAGE": "job:1", "CI_RUNNER_SETUP_IMAGE": " setup:2 "}
    assert project_policy(env).setup_image == "setup:2"
    assert project_policy(env, setup_image="flag:3").setup_image == "flag:3"
    assert project_policy({**env, "CI_RUNNER_SETUP_IMAGE": ""}).setup_image == "job:1"


def test_lists_are_comma_or_space_separated_empty_is_unset_and_none_is_nothing() -> None:
    env = {
        "CI_RUNNER_ALLOWED_SECRETS": "WANDB_API_KEY, AWS_*\nHF_TOKEN",
        "CI_RUNNER_ALLOWED_OUTPUTS": "",
        "CI_RUNNER_ALLOWED_PIP_CACHE_CLAIMS": "none",
        "CI_RUNNER_ALLOWED_LOCAL_QUEUES": " team-a,team-b-* ",
        "CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES": "none",
        "CI_COMMIT_REF_PROTECTED": "true",
    }
    assert project_policy(env) == ProjectPolicy(
        allowed_secrets=("WANDB_API_KEY", "AWS_*", "HF_TOKEN"),
        allowed_outputs=None,
        allowed_pip_cache_claims=(),
        allowed_local_queues=("team-a", "team-b-*"),
        allowed_workload_priority_classes=(),
        ref_protected=True,
    )


def test_the_kueue_lists_are_read_as_the_component_sets_them() -> None:
    env = {
        "CI_RUNNER_ALLOWED_LOCAL_QUEUES": "",
        "CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES": "low, batch-?",
    }
    policy = project_policy(env)
    assert policy.allowed_local_queues is None
    assert policy.allowed_workload_priority_classes == ("low", "batch-?")
    assert project_policy({"CI_RUNNER_ALLOWED_LOCAL_QUEUES": "none"}).allowed_local_queues == ()


@pytest.mark.parametrize("value", ["false", "", "1", "yes"])
def test_only_gitlab_s_true_is_a_protected_ref(value: str) -> None:
    assert project_policy({"CI_COMMIT_REF_PROTECTED": value}).ref_protected is False


def test_gitlab_s_registry_and_job_tokens_are_never_passable() -> None:
    assert {"GITLAB_TOKEN", "CI_JOB_TOKEN", "CI_REGISTRY_PASSWORD", "KUBECONFIG"} <= NEVER_PASSABLE
