"""The CI files as GitLab evaluates them, with gitlab-ci-local (npm, 4.75.1 on Node.js 22; `make
test` installs it): every form the README includes the job in (the component by version, by a
semantic version range, by ~latest and by SHA; ci/train.yml by `include: project` and as a copy),
the README's snippets in a project that has no `stages:`, which jobs each kind of pipeline gets,
the inputs' rules with GitLab's own examples, and ci-runner's own .gitlab-ci.yml."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ci_runner.policy import project_policy
from testing.git import run_git
from testing.gitlab_ci_local import (
    CiRunnerRemote,
    ci_runner_project,
    ci_runner_remote,
    gitlab_ci_local,
    run_gitlab_ci_local,
)
from testing.paths import REPO_ROOT

# gitlab-ci-local validates against GitLab's schema for seconds on every call: run by make test
pytestmark = pytest.mark.slow
README = REPO_ROOT / "README.md"
JOB_FILE = REPO_ROOT / "templates" / "project" / "train.yml"
IMAGE = "registry.example.com/your-group/ci-runner:0.1.0"
RELEASED_IMAGE = "$CI_REGISTRY/ci-runner/ci-runner"  # the image_repository default


def readme_snippets(marker: str = "/ci-runner/train@") -> list[str]:
    """The YAML blocks of README's "GitLab quick start" holding ``marker`` (by default, those
    that include the component)."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    snippets = []
    for block in blocks:
        text = "\n".join(
            line[3:] if line.startswith("   ") else line for line in block.splitlines()
        )
        if marker in text:
            snippets.append(text)
    return snippets


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[CiRunnerRemote]:
    with ci_runner_remote(tmp_path) as served:
        yield served


def user_project(tmp_path: Path, ci_yaml: str, remote: CiRunnerRemote) -> Path:
    """``group/user-project`` on the GitLab that serves the ci-runner project, its .gitlab-ci.yml
    ``ci_yaml`` with the README's ``gitlab.example.com/<group>/`` made that GitLab and group."""
    project = tmp_path / "user-project"
    project.mkdir(parents=True)
    ci_yaml = ci_yaml.replace("gitlab.example.com/<group>/", f"{remote.host}/group/")
    (project / ".gitlab-ci.yml").write_text(ci_yaml.replace("<group>/", "group/"))
    (project / "train.yaml").write_text("name: x\n")
    if "local: ci/train.yml" in ci_yaml:  # the README's copy
        (project / "ci").mkdir()
        shutil.copy(JOB_FILE, project / "ci" / "train.yml")
    run_git(["init", "-q", "-b", "main"], project)
    run_git(["remote", "add", "origin", f"http://{remote.host}/group/user-project.git"], project)
    run_git(["add", "-A"], project)
    run_git(["commit", "-q", "-m", "init"], project)
    return project


def gitlab_ci_local_refuses(project: Path, args: list[str]) -> str:
    """The last line gitlab-ci-local prints when it refuses the pipeline (exit code 1)."""
    done = subprocess.run(
        [*gitlab_ci_local(), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FORCE_COLOR": "0"},
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return (done.stdout + done.stderr).strip().splitlines()[-1]


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
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    snippet = readme_snippets()[0]
    assert "stages" not in snippet
    project = user_project(tmp_path, snippet, remote)
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
    tmp_path: Path, remote: CiRunnerRemote, variables: dict[str, str], jobs: dict[str, str]
) -> None:
    project = user_project(tmp_path, readme_snippets()[0], remote)
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
    tmp_path: Path, remote: CiRunnerRemote, variables: dict[str, str], jobs: dict[str, str]
) -> None:
    snippet = readme_snippets()[-1]
    assert "workflow" in snippet and "merge_request_pipelines: true" in snippet
    assert "on_new_commit: interruptible" in snippet
    project = user_project(tmp_path, snippet, remote)
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


def preview(project: Path) -> dict[str, Any]:
    """The jobs as gitlab-ci-local evaluates the pipeline (validated against GitLab's schema)."""
    stdout = run_gitlab_ci_local(project, ["--preview"])
    jobs: dict[str, Any] = yaml.safe_load(stdout[stdout.index("---") :])
    return jobs


def preview_train(
    tmp_path: Path, remote: CiRunnerRemote, include: dict[str, Any] | None = None, **inputs: Any
) -> dict[str, Any]:
    """The train job of a pipeline that includes the component at 1.2.0 (or ``include``) with
    ``inputs``."""
    entry = include or {"component": f"{remote.host}/group/ci-runner/train@1.2.0"}
    ci_yaml = yaml.safe_dump({"include": [{**entry, "inputs": {"image": IMAGE, **inputs}}]})
    job: dict[str, Any] = preview(user_project(tmp_path, ci_yaml, remote))["train"]
    return job


def test_a_timed_out_script_still_runs_the_after_script_and_it_cancels(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    job = preview_train(tmp_path, remote, script_timeout="1h50m", after_script_timeout="10m")
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


def test_environment_resource_group_and_expose_as_reach_the_job(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    job = preview_train(
        tmp_path,
        remote,
        environment="gpu/prod",
        resource_group="gpu-cluster",
        expose_as="Model report",
    )
    assert job["environment"] == {"name": "gpu/prod", "action": "access"}
    assert job["resource_group"] == "gpu-cluster"
    assert job["artifacts"]["expose_as"] == "Model report"
    assert job["artifacts"]["paths"] == ["ci-runner-out/"]


def test_the_kueue_allow_lists_reach_the_job_s_policy(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    job = preview_train(
        tmp_path,
        remote,
        allowed_local_queues="team-a, team-b-*",
        allowed_workload_priority_classes="none",
    )
    variables = {k: str(v) for k, v in job["variables"].items()}
    assert variables["CI_RUNNER_ALLOWED_LOCAL_QUEUES"] == "team-a, team-b-*"
    policy = project_policy(variables)
    assert (policy.allowed_local_queues, policy.allowed_workload_priority_classes) == (
        ("team-a", "team-b-*"),
        (),
    )


def test_the_default_inputs_make_a_valid_job(tmp_path: Path, remote: CiRunnerRemote) -> None:
    job = preview_train(tmp_path, remote)  # gitlab-ci-local checks it against GitLab's schema
    assert job["environment"] == {"name": "training", "action": "access"}
    assert job["artifacts"]["expose_as"] == "Training report"


@pytest.mark.parametrize(
    ("reference", "image"),
    [
        # GitLab resolves ~latest and a partial version to the newest matching catalog version
        # (lib/gitlab/ci/components/instance_path.rb) and gives the component that version
        ("~latest", f"{RELEASED_IMAGE}:1.2.0"),
        ("1.2", f"{RELEASED_IMAGE}:1.2.0"),
        ("1", f"{RELEASED_IMAGE}:1.2.0"),
    ],
)
def test_the_component_by_a_version_range_runs_the_image_of_that_version(
    tmp_path: Path, remote: CiRunnerRemote, reference: str, image: str
) -> None:
    component = f"{remote.host}/group/ci-runner/train@{reference}"
    project = user_project(
        tmp_path, yaml.safe_dump({"include": [{"component": component}]}), remote
    )
    job = preview(project)["train"]
    assert (job["image"], job["variables"]["CI_RUNNER_RELEASED_IMAGE"]) == (
        {"name": "$CI_RUNNER_RELEASED_IMAGE"},
        image,
    )
    assert list_jobs(project, **PUSH) == {"train": "test"}


def test_the_component_by_sha_runs_the_image_it_is_given(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    # By SHA GitLab gives the component no version (component_context_spec.rb): image is passed.
    include = {"component": f"{remote.host}/group/ci-runner/train@{remote.sha}"}
    job = preview_train(tmp_path, remote, include)
    assert job["image"] == {"name": IMAGE}


def test_the_readmes_project_include_and_copy_list_the_job(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    (snippet,) = readme_snippets("file: templates/project/train.yml")
    project = user_project(tmp_path / "project", snippet, remote)
    job = preview(project)["train"]
    assert job["image"] == {"name": "$CI_REGISTRY/group/ci-runner:1.2.0"}
    assert list_jobs(project, **PUSH) == {"train": "test"}

    copied = snippet.replace("- project: <group>/ci-runner\n", "- local: ci/train.yml\n")
    copied = re.sub(r" *(ref|file): .*\n", "", copied)
    assert "# or, copied:  - local: ci/train.yml  with the same inputs" in copied
    project = user_project(tmp_path / "copy", copied, remote)
    assert preview(project)["train"] == job


@pytest.mark.parametrize(
    "include",
    [
        {"project": "group/ci-runner", "ref": "1.2.0", "file": "templates/project/train.yml"},
        {"local": "ci/train.yml"},
    ],
    ids=["project", "copy"],
)
def test_the_job_file_without_an_image_is_refused(
    tmp_path: Path, remote: CiRunnerRemote, include: dict[str, str]
) -> None:
    project = user_project(tmp_path, yaml.safe_dump({"include": [include]}), remote)
    where = (
        ".gitlab-ci-local/includes/127.0.0.1/group/ci-runner/1.2.0/templates/project/train.yml"
        if "project" in include
        else "ci/train.yml"
    )
    assert gitlab_ci_local_refuses(project, ["--list"]) == (
        f"This GitLab CI configuration is invalid: `{where}`: `image` input: required value has "
        "not been provided."
    )


def test_the_component_outside_include_component_is_refused(
    tmp_path: Path, remote: CiRunnerRemote
) -> None:
    # GitLab: "unknown interpolation provided: `version` in `component.version`": why
    # ci/train.yml exists (component_context_spec.rb, the include:project:file case)
    include = {"project": "group/ci-runner", "ref": "1.2.0", "file": "templates/train.yml"}
    ci_yaml = yaml.safe_dump({"include": [{**include, "inputs": {"image": IMAGE}}]})
    project = user_project(tmp_path, ci_yaml, remote)
    refused = gitlab_ci_local_refuses(project, ["--list"])
    assert refused.endswith(
        "/.gitlab-ci-local/includes/127.0.0.1/group/ci-runner/1.2.0/templates/train.yml`: "
        "`component.version` cannot be used outside a component."
    )


# GitLab's own examples (spec files of gitlabhq) and its length limits, for the inputs whose
# values GitLab checks later: environment names (spec/lib/gitlab/regex_spec.rb,
# .environment_name_regex; app/models/environment.rb: 255 characters), resource group keys (the
# same rule, app/models/ci/resource_group.rb) and expose_as
# (spec/lib/gitlab/ci/config/entry/artifacts_spec.rb; 100 characters).
ENVIRONMENT_OK = ["foo", "a", "foo-1", "FOO", "foo/1", "foo.1", "review/$CI_COMMIT_REF_SLUG"]
ENVIRONMENT_BAD = ["9&foo", "foo-^", "!!()()", "/foo", "foo/", "/foo/", "/", ""]
INPUT_EXAMPLES = {
    "environment": ([*ENVIRONMENT_OK, "e" * 255], [*ENVIRONMENT_BAD, "e" * 256]),
    "resource_group": ([*ENVIRONMENT_OK, "", "r" * 255], [*ENVIRONMENT_BAD[:-1], "r" * 256]),
    "expose_as": (
        ["Test results", "A" * 100],
        ["A" * 101, "", '<script>alert("xss");</script>'],
    ),
}


def job_file_project(tmp_path: Path, remote: CiRunnerRemote, inputs: list[dict[str, str]]) -> Path:
    """A project that copies ci/train.yml and includes it once per ``inputs``, as job train-<i>."""
    includes = [
        {"local": "ci/train.yml", "inputs": {"image": IMAGE, "job_name": f"train-{i}", **given}}
        for i, given in enumerate(inputs)
    ]
    return user_project(tmp_path, yaml.safe_dump({"include": includes}), remote)


@pytest.mark.parametrize("name", sorted(INPUT_EXAMPLES))
def test_gitlabs_examples_pass_the_inputs_rule(
    tmp_path: Path, remote: CiRunnerRemote, name: str
) -> None:
    good, _ = INPUT_EXAMPLES[name]
    jobs = preview(job_file_project(tmp_path, remote, [{name: value} for value in good]))
    assert [input_in_job(jobs[f"train-{i}"], name) for i in range(len(good))] == good


def input_in_job(job: dict[str, Any], name: str) -> Any:
    """Where the job holds the value of input ``name``."""
    if name == "environment":
        return job["environment"]["name"]
    if name == "expose_as":
        return job["artifacts"]["expose_as"]
    return job[name]


@pytest.mark.parametrize(
    ("name", "value"),
    [(name, value) for name, (_, bad) in sorted(INPUT_EXAMPLES.items()) for value in bad],
    ids=lambda v: v if len(v) < 30 else f"{v[:3]}x{len(v)}",
)
def test_gitlabs_refused_examples_are_refused_by_the_input(
    tmp_path: Path, remote: CiRunnerRemote, name: str, value: str
) -> None:
    refused = gitlab_ci_local_refuses(
        job_file_project(tmp_path, remote, [{name: value}]), ["--list"]
    )
    assert refused.startswith(
        f"This GitLab CI configuration is invalid: `ci/train.yml`: `{name}` input: `{value}` does "
        "not match required regex: "
    )


def test_a_job_name_gitlab_would_not_run_is_refused(tmp_path: Path, remote: CiRunnerRemote) -> None:
    # processable.rb: at most 255 characters; jobs.rb: a name starting with . is a hidden job
    good = ["train gpu:1", "t" * 255]
    project = job_file_project(tmp_path / "good", remote, [{"job_name": name} for name in good])
    assert list_jobs(project, **PUSH) == {name: "test" for name in good}
    for bad in [".train", "t" * 256, ""]:
        project = job_file_project(tmp_path / f"bad{len(bad)}", remote, [{"job_name": bad}])
        assert gitlab_ci_local_refuses(project, ["--list"]).startswith(
            f"This GitLab CI configuration is invalid: `ci/train.yml`: `job_name` input: `{bad}` "
            "does not match required regex: "
        )
