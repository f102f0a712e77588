"""The CI files as GitLab evaluates them, with gitlab-ci-local (npm, 4.65.1; `make test` installs
it): the README's include snippet in a project that has no `stages:`, which jobs each kind of
pipeline gets, and ci-runner's own .gitlab-ci.yml."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing.git import run_git
from testing.gitlab_ci_local import ci_runner_project, run_gitlab_ci_local
from testing.paths import REPO_ROOT

# gitlab-ci-local validates against GitLab's schema for seconds on every call: run by make test
pytestmark = pytest.mark.slow
README = REPO_ROOT / "README.md"
TEMPLATE = REPO_ROOT / "templates" / "train.yml"
IMAGE = "registry.example.com/your-group/ci-runner:0.1.0"


def readme_snippets() -> list[str]:
    """The YAML blocks of README's "GitLab quick start" that include the component."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    snippets = []
    for block in blocks:
        text = "\n".join(
            line[3:] if line.startswith("   ") else line for line in block.splitlines()
        )
        if "/ci-runner/train@" in text:
            snippets.append(text)
    return snippets


def user_project(tmp_path: Path, ci_yaml: str) -> Path:
    """A git repository whose .gitlab-ci.yml is ``ci_yaml``, with the component vendored:
    gitlab-ci-local cannot fetch ``include: component:`` offline, so it becomes ``local:`` with
    the same inputs."""
    project = tmp_path / "user-project"
    (project / "templates").mkdir(parents=True)
    shutil.copy(TEMPLATE, project / "templates" / "train.yml")
    config: dict[str, Any] = yaml.safe_load(ci_yaml)
    for entry in config["include"]:
        if "/ci-runner/train@" in entry.get("component", ""):
            entry.pop("component")
            entry["local"] = "templates/train.yml"
    (project / ".gitlab-ci.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (project / "train.yaml").write_text("name: x\n")
    run_git(["init", "-q", "-b", "main"], project)
    run_git(["add", "-A"], project)
    run_git(["commit", "-q", "-m", "init"], project)
    return project


def list_jobs(project: Path, **variables: str) -> dict[str, str]:
    """Job name -> stage of the jobs a pipeline with ``variables`` runs (``when: never`` out)."""
    stdout = run_gitlab_ci_local(project, ["--list-json"], variables)
    jobs = json.loads(stdout[stdout.index("[") :])
    return {job["name"]: job["stage"] for job in jobs if job["when"] != "never"}


PUSH = {"CI_PIPELINE_SOURCE": "push"}
PUSH_WITH_MR = {"CI_PIPELINE_SOURCE": "push", "CI_OPEN_MERGE_REQUESTS": "group/proj!7"}
MR = {
    "CI_PIPELINE_SOURCE": "merge_request_event",
    "CI_MERGE_REQUEST_IID": "7",
    "CI_COMMIT_BRANCH": "",
}
WEB = {"CI_PIPELINE_SOURCE": "web"}
SCHEDULE = {"CI_PIPELINE_SOURCE": "schedule"}
TAG = {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_TAG": "v1", "CI_COMMIT_BRANCH": ""}


def test_the_readme_snippet_makes_a_pipeline_in_a_project_without_stages(
    tmp_path: Path,
) -> None:
    snippet = readme_snippets()[0]
    assert "stages" not in snippet
    project = user_project(tmp_path, snippet)
    assert list_jobs(project, **PUSH) == {"train": "test"}


@pytest.mark.parametrize(
    ("variables", "jobs"),
    [
        (PUSH, {"train": "test"}),
        (PUSH_WITH_MR, {"train": "test"}),  # the branch pipeline is the project's only one
        (MR, {}),  # no MR pipeline of the component's making
        (WEB, {"train": "test"}),
        (SCHEDULE, {}),
        (TAG, {}),
    ],
    ids=["push", "push-with-open-mr", "merge-request", "web", "schedule", "tag"],
)
def test_jobs_by_pipeline_in_a_project_with_branch_pipelines(
    tmp_path: Path, variables: dict[str, str], jobs: dict[str, str]
) -> None:
    project = user_project(tmp_path, readme_snippets()[0])
    assert list_jobs(project, **variables) == jobs


@pytest.mark.parametrize(
    ("variables", "jobs"),
    [
        (PUSH, {"train": "test"}),
        (PUSH_WITH_MR, {}),  # the MR pipeline trains it
        (MR, {"train": "test"}),
        (WEB, {"train": "test"}),
        (SCHEDULE, {}),
        (TAG, {}),
    ],
    ids=["push", "push-with-open-mr", "merge-request", "web", "schedule", "tag"],
)
def test_jobs_by_pipeline_with_the_readmes_merge_request_workflow(
    tmp_path: Path, variables: dict[str, str], jobs: dict[str, str]
) -> None:
    snippet = readme_snippets()[-1]
    assert "workflow" in snippet and "merge_request_pipelines: true" in snippet
    project = user_project(tmp_path, snippet)
    assert list_jobs(project, **variables) == jobs


BUILD_AND_TEST = {"dist": "build", "image-build": "build", "unit": "test", "e2e": "test"}
RELEASE = {"image-release": "release", "pypi-publish": "release", "create-release": "release"}


@pytest.mark.parametrize(
    ("variables", "jobs"),
    [
        ({**PUSH, "CI_COMMIT_BRANCH": "main"}, BUILD_AND_TEST),
        (MR, BUILD_AND_TEST),
        (WEB, BUILD_AND_TEST),
        ({**WEB, "TRAIN_EXAMPLE": "true"}, {**BUILD_AND_TEST, "example-train": "train"}),
        ({**PUSH, "CI_COMMIT_TAG": "1.2.0"}, {**BUILD_AND_TEST, **RELEASE}),
        ({**PUSH, "CI_COMMIT_TAG": "v1.2.0"}, BUILD_AND_TEST),  # the catalog refuses a leading v
        ({**PUSH, "CI_COMMIT_TAG": "1.2"}, BUILD_AND_TEST),
    ],
    ids=["branch", "merge-request", "web", "web-train-example", "tag", "v-tag", "short-tag"],
)
def test_ci_runners_own_pipeline(
    tmp_path: Path, variables: dict[str, str], jobs: dict[str, str]
) -> None:
    assert list_jobs(ci_runner_project(tmp_path), **variables) == jobs


def test_the_example_job_runs_in_the_image_this_pipeline_built(tmp_path: Path) -> None:
    stdout = run_gitlab_ci_local(ci_runner_project(tmp_path), ["--preview"])
    preview = yaml.safe_load(stdout[stdout.index("---") :])
    assert preview["example-train"]["image"] == {"name": "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHA"}
    assert "before_script" not in preview["example-train"]


def preview_train(tmp_path: Path, **inputs: str) -> dict[str, Any]:
    """The train job as gitlab-ci-local evaluates the component with ``inputs`` (validated
    against GitLab's schema)."""
    component = "$CI_SERVER_FQDN/your-group/ci-runner/train@1.0.0"
    ci_yaml = yaml.safe_dump(
        {"include": [{"component": component, "inputs": {"image": IMAGE, **inputs}}]}
    )
    stdout = run_gitlab_ci_local(user_project(tmp_path, ci_yaml), ["--preview"])
    job: dict[str, Any] = yaml.safe_load(stdout[stdout.index("---") :])["train"]
    return job


def test_a_timed_out_script_still_runs_the_after_script_and_it_cancels(tmp_path: Path) -> None:
    job = preview_train(tmp_path, script_timeout="1h50m", after_script_timeout="10m")
    variables = job["variables"]
    assert (variables["RUNNER_SCRIPT_TIMEOUT"], variables["RUNNER_AFTER_SCRIPT_TIMEOUT"]) == (
        "1h50m",
        "10m",
    )
    # gitlab-ci-local has no script timeout: after_script is run as GitLab Runner runs it
    # then, with the job's variables and CI_JOB_STATUS=timedout (common/build.go)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ci-runner").write_text('#!/bin/sh\nprintf "%s|" "$@" > "$CALLS"\n')
    (bin_dir / "ci-runner").chmod(0o755)
    env = {
        **{k: str(v) for k, v in variables.items()},
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "CI_JOB_STATUS": "timedout",
    }
    for line in job["after_script"]:
        subprocess.run(["/bin/sh", "-c", line], env=env, check=True)
    assert (tmp_path / "calls").read_text() == (
        "cancel|--config|train.yaml|--output-dir|ci-runner-out|"
    )


def test_environment_resource_group_and_expose_as_reach_the_job(tmp_path: Path) -> None:
    job = preview_train(
        tmp_path, environment="gpu/prod", resource_group="gpu-cluster", expose_as="Model report"
    )
    assert job["environment"] == {"name": "gpu/prod", "action": "access"}
    assert job["resource_group"] == "gpu-cluster"
    assert job["artifacts"]["expose_as"] == "Model report"
    assert job["artifacts"]["paths"] == ["ci-runner-out/"]


def test_the_default_inputs_make_a_valid_job(tmp_path: Path) -> None:
    job = preview_train(tmp_path)  # gitlab-ci-local checks it against GitLab's schema
    assert job["environment"] == {"name": "training", "action": "access"}
    assert job["artifacts"]["expose_as"] == "Training report"
