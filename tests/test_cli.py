"""``ci-runner validate`` / ``render`` through ``main(argv)``: exact output and exit codes."""

from __future__ import annotations

import argparse
import io
import os
import platform
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from ci_runner import __version__, cli
from ci_runner.commands.common import Command, Runtime
from ci_runner.config.schema import load_config
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, GitError
from ci_runner.policy import SETUP_IMAGE_VARIABLE
from ci_runner.render import objects_yaml
from ci_runner.render_job import render_objects
from testing.fake_kube.crd import validate_mpijob
from testing.git import run_git
from testing.plan_cases import SETUP_IMAGE, trusted_plan

GitRepo = Callable[[dict[str, str]], tuple[Path, str]]
ORIGIN = "https://gitlab.example.com/group/demo.git"
JOB_TOKEN = "glcbt-canary-job-token-8c1f"
GIT_TOKEN = "glpat-canary-git-token-4e7a"
API_TOKEN = "glpat-canary-api-token-2b9d"
TRAIN_YAML = """\
name: demo
image: horovod/horovod:0.28.1
command: python train.py --epochs 3
workers: 2
requirements: requirements.txt
secrets: [WANDB_API_KEY]
"""


class Result:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr


def run(
    argv: list[str], cwd: Path, env: Mapping[str, str] | None = None, crash_dir: Path | None = None
) -> Result:
    """``ci-runner argv`` in ``cwd``; without ``env``, outside CI with the project's setup image
    set, as a maintainer's variable would."""
    out, err = io.StringIO(), io.StringIO()
    env = {SETUP_IMAGE_VARIABLE: SETUP_IMAGE} if env is None else env
    code = cli.main(argv, env=env, cwd=cwd, stdout=out, stderr=err, crash_dir=crash_dir)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def project(git_repo: GitRepo) -> tuple[Path, str]:
    repo, sha = git_repo(
        {"train.yaml": TRAIN_YAML, "requirements.txt": "numpy\n", "src/train.py": "print(1)\n"}
    )
    run_git(["remote", "add", "origin", ORIGIN], repo)
    return repo, sha


def ci_env(sha: str) -> dict[str, str]:
    return {
        "GITLAB_CI": "true",
        "CI_COMMIT_SHA": sha,
        "CI_PROJECT_PATH": "group/demo",
        "CI_PROJECT_URL": "https://gitlab.example.com/group/demo",
        "CI_PIPELINE_ID": "77",
        "CI_JOB_ID": "901",
        "CI_JOB_IMAGE": SETUP_IMAGE,
        "CI_COMMIT_REF_NAME": "main",
        "CI_REPOSITORY_URL": f"https://gitlab-ci-token:{JOB_TOKEN}@gitlab.example.com/group/demo.git",
        "CI_JOB_TOKEN": JOB_TOKEN,
        "CI_RUNNER_GIT_TOKEN": GIT_TOKEN,
        "GITLAB_TOKEN": API_TOKEN,
        "WANDB_API_KEY": "wandb-canary-value-3f8e",
    }


def test_validate(project: tuple[Path, str]) -> None:
    repo, sha = project
    result = run(["validate"], repo)
    assert (result.code, result.stderr) == (0, "")
    job = f"demo-{sha[:8]}-l"
    assert result.stdout.startswith(f"[ci-runner] train.yaml at {sha[:8]} is valid: MPIJob {job}")
    assert result.stdout.endswith(", 2 workers x 1 slot = 2 ranks\n")


def test_render_prints_the_manifest_and_names_the_secret(project: tuple[Path, str]) -> None:
    repo, sha = project
    result = run(["render"], repo, ci_env(sha))
    config = load_config(TRAIN_YAML, "train.yaml")
    ctx = CIContext(
        sha=sha,
        project_path="group/demo",
        project_url="https://gitlab.example.com/group/demo",
        pipeline_id="77",
        job_id="901",
        ref_name="main",
        repo_url=ORIGIN,
    )
    assert result.code == 0
    plan = trusted_plan(config, ctx)
    assert result.stdout == objects_yaml(render_objects(plan))
    mpijob, scripts, secret = yaml.safe_load_all(result.stdout)
    assert (scripts["kind"], scripts["metadata"]["name"]) == (
        "ConfigMap",
        f"{plan.mpijob_name}-scripts",
    )
    # What train creates, its values masked.
    assert secret["stringData"] == {
        "GIT_USERNAME": "[MASKED]",
        "GIT_PASSWORD": "[MASKED]",
        "WANDB_API_KEY": "[MASKED]",
    }
    assert result.stderr == (
        f"[ci-runner] the MPIJob reads Secret demo-{sha[:8]}-901-secrets (keys GIT_USERNAME, "
        "GIT_PASSWORD, WANDB_API_KEY); `ci-runner train` creates it with the values masked here\n"
    )
    assert validate_mpijob(mpijob) == []


def test_render_in_a_ci_job_without_timeout_follows_ci_job_timeout(
    project: tuple[Path, str],
) -> None:
    repo, sha = project
    started = datetime.now(timezone.utc) - timedelta(minutes=10)
    env = {
        **ci_env(sha),
        "CI_JOB_TIMEOUT": "3600",
        "CI_JOB_STARTED_AT": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    result = run(["render"], repo, env)
    assert result.code == 0
    deadline = next(yaml.safe_load_all(result.stdout))["spec"]["runPolicy"]["activeDeadlineSeconds"]
    assert 3600 - 600 - 300 - 5 <= deadline <= 3600 - 600 - 300  # 5 min kept for the report


def test_a_timeout_longer_than_the_ci_jobs_warns_in_validate_render_and_train(
    git_repo: GitRepo,
) -> None:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML + "timeout: 2h\n", "requirements.txt": "x\n"})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    env = {**ci_env(sha), "CI_JOB_TIMEOUT": "3600"}
    warning = (
        "[ci-runner] warning: train.yaml: timeout 2h is longer than this CI job's timeout 1h "
        "(CI_JOB_TIMEOUT): GitLab stops the job first and the training is cancelled with it; "
        "fix: lower timeout in train.yaml, or raise the job's timeout (the job's timeout: "
        "keyword, or the project's Settings > CI/CD > General pipelines > Timeout)\n"
    )
    rendered = run(["render"], repo, env)
    assert rendered.code == 0
    assert rendered.stderr.startswith(warning)
    assert (
        next(yaml.safe_load_all(rendered.stdout))["spec"]["runPolicy"]["activeDeadlineSeconds"]
        == 7200
    )
    validated = run(["validate"], repo, env)
    assert (validated.code, validated.stderr) == (0, warning)
    # train warns before anything else fails (here: no cluster to connect to)
    trained = run(["train"], repo, {**env, "KUBECONFIG": str(repo / "missing")})
    assert trained.stderr.startswith(warning)


def test_a_command_that_starts_mpi_or_needs_a_shell_warns_in_validate_render_and_train(
    git_repo: GitRepo,
) -> None:
    seed = "horovodrun -np 3 -H $HOSTS python train.py && echo done"
    text = TRAIN_YAML.replace("python train.py --epochs 3", f'"{seed}"')
    repo, sha = git_repo({"train.yaml": text, "requirements.txt": "x\n"})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    warnings = (
        "[ci-runner] warning: train.yaml: command starts with horovodrun, but ci-runner starts "
        "mpirun itself and runs command inside each rank, so every rank would start horovodrun "
        "again; fix: write only what each rank runs, e.g. command: python train.py (workers and "
        "slots_per_worker say how many ranks)\n"
        "[ci-runner] warning: train.yaml: command holds shell syntax ('$HOSTS', '&&') that no "
        "shell reads: each rank runs command as a program and its arguments, which get these "
        "words as they are; fix: put the steps in a script in the repository and run that "
        "(command: sh train.sh), and read variables in your code (os.environ)\n"
    )
    validated = run(["validate"], repo)
    assert (validated.code, validated.stderr) == (0, warnings)
    rendered = run(["render"], repo, ci_env(sha))
    assert rendered.code == 0
    assert rendered.stderr.startswith(warnings)
    # train warns before anything else fails (here: no cluster to connect to)
    trained = run(["train"], repo, {**ci_env(sha), "KUBECONFIG": str(repo / "missing")})
    assert trained.stderr.startswith(warnings)


def test_validate_says_when_train_yaml_has_uncommitted_changes(
    project: tuple[Path, str],
) -> None:
    repo, sha = project
    assert run(["validate"], repo).stderr == ""  # as committed: nothing to say
    (repo / "train.yaml").write_text(TRAIN_YAML.replace("workers: 2", "workers: 0"))
    result = run(["validate"], repo)
    assert result.code == 0  # the commit's train.yaml is valid: that is what was checked
    assert result.stderr == (
        f"[ci-runner] note: train.yaml has uncommitted changes; validate checked commit "
        f"{sha[:8]}; commit them (or pass --sha REV to choose the commit)\n"
    )
    rendered = run(["render"], repo)
    assert rendered.stderr.startswith(
        f"[ci-runner] note: train.yaml has uncommitted changes; render read it from commit "
        f"{sha[:8]}; commit them (or pass --sha REV to choose the commit)\n"
    )
    # --sha names the commit on purpose; a deleted file is a change too
    assert run(["validate", "--sha", sha], repo).stderr == ""
    (repo / "train.yaml").unlink()
    assert run(["validate"], repo).stderr.startswith("[ci-runner] note: train.yaml has ")


def test_no_token_ever_reaches_the_output(project: tuple[Path, str]) -> None:
    repo, sha = project
    env = ci_env(sha)
    for argv in (["render"], ["validate"], ["render", "--sha", JOB_TOKEN]):
        result = run(argv, repo, env)
        for secret in (JOB_TOKEN, GIT_TOKEN, API_TOKEN, env["WANDB_API_KEY"]):
            assert secret not in result.stdout + result.stderr


def test_an_error_mentioning_a_token_is_masked(project: tuple[Path, str]) -> None:
    repo, sha = project
    result = run(["render", "--sha", JOB_TOKEN], repo, ci_env(sha))
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: no commit '[MASKED]' in {repo}; fix: pass --sha with a commit that "
        "exists here (git fetch it first if it was pushed from elsewhere)\n"
    )


def test_train_yaml_is_read_from_the_commit_not_the_work_tree(project: tuple[Path, str]) -> None:
    repo, _ = project
    (repo / "train.yaml").write_text(TRAIN_YAML.replace("workers: 2", "workers: 5"))
    result = run(["render"], repo)
    assert result.code == 0
    assert "      replicas: 2\n" in result.stdout


def test_sha_selects_an_older_commit(project: tuple[Path, str], git_repo: GitRepo) -> None:
    repo, first = project
    git_repo({"train.yaml": TRAIN_YAML.replace("workers: 2", "workers: 3")})
    result = run(["validate", "--sha", first[:10]], repo)
    assert result.code == 0
    assert result.stdout.endswith(", 2 workers x 1 slot = 2 ranks\n")
    assert result.stdout.startswith(f"[ci-runner] train.yaml at {first[:8]} is valid")


def test_config_from_a_subdirectory_is_resolved_to_the_repository(
    project: tuple[Path, str], git_repo: GitRepo
) -> None:
    repo, _ = project
    _, sha = git_repo({"jobs/big/train.yaml": TRAIN_YAML.replace("workers: 2", "workers: 4")})
    result = run(["validate", "--config", "train.yaml"], repo / "jobs" / "big")
    assert result.code == 0
    assert result.stdout.startswith(f"[ci-runner] jobs/big/train.yaml at {sha[:8]} is valid")
    result = run(["validate", "--config", "../../train.yaml"], repo / "jobs" / "big")
    assert result.stdout.startswith(f"[ci-runner] train.yaml at {sha[:8]} is valid")


def test_config_problems_are_one_line_each(git_repo: GitRepo) -> None:
    text = TRAIN_YAML.replace("workers: 2", "workerz: 2").replace("horovod/horovod:0.28.1", "")
    repo, _ = git_repo({"train.yaml": text, "requirements.txt": ""})
    result = run(["render"], repo)
    with pytest.raises(ConfigError) as expected:
        load_config(text, "train.yaml")
    assert (result.code, result.stdout) == (1, "")
    assert len(expected.value.lines()) == 2
    assert result.stderr == "".join(
        f"ci-runner: error: {line}\n" for line in expected.value.lines()
    )


def validate_quietly(repo: Path) -> Result:
    """``ci-runner validate`` in ``repo``, which must let no Python warning through."""
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = run(["validate"], repo)
    assert [str(warning.message) for warning in shown] == []
    return result


MANY_METRICS = "".join(f"  m{i}: {{pattern: 'm{i}=(?P<value>[0-9.]+)'}}\n" for i in range(2400))


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (  # a number JSON cannot hold in the affinity
            "kubernetes: {launcher: {affinity: {nodeAffinity: {x: .inf}}}}\n",
            "train.yaml:7: kubernetes.launcher.affinity.nodeAffinity.x: is .inf, a number "
            "Kubernetes cannot read (JSON has no NaN or infinity); fix: write a finite number, or "
            "quote it ('.inf') if you mean the text",
        ),
        (  # a quantity Kubernetes cannot hold
            "resources:\n  cpu: 1e9999999\n",
            "train.yaml:8: resources.cpu: must be at most 9223372036854775807 (2^63-1 bytes or "
            "cores, the most Kubernetes holds), got '1e9999999'; fix: request what the job "
            "needs, e.g. cpu: 4",
        ),
        (  # a metric pattern Python's re warns about: one line, not a warning
            "metrics:\n  loss:\n    pattern: 'loss [[:digit:]]+ (?P<value>[0-9.]+)'\n",
            "train.yaml:9: metrics.loss.pattern: is ambiguous: possible nested set at position 6, "
            "which Python's re and RE2 may read differently; fix: write the class out ([0-9] for "
            "[[:digit:]], [a-zA-Z] for [[:alpha:]]) and escape a '[' inside [...] as \\[",
        ),
        (  # more metrics than the parser is given
            "metrics:\n" + MANY_METRICS,
            "train.yaml:8: metrics: may have at most 32 entries, got 2400; fix: remove 2368",
        ),
    ],
)
def test_what_kubernetes_or_the_parser_cannot_take_is_one_line(
    git_repo: GitRepo, extra: str, line: str
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML + extra, "requirements.txt": ""})
    result = validate_quietly(repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == f"ci-runner: error: {line}\n"


def test_requirements_must_exist_at_the_commit(git_repo: GitRepo) -> None:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML})
    (repo / "requirements.txt").write_text("numpy\n")  # in the work tree only
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: train.yaml:5: requirements: requirements.txt does not exist in commit "
        f"{sha[:8]}; fix: commit it, or give its path relative to the repository root\n"
    )


def test_a_train_yaml_or_requirements_too_large_is_refused_in_one_line(git_repo: GitRepo) -> None:
    big = "#" * 2**20 + "\n"
    repo, sha = git_repo({"train.yaml": TRAIN_YAML + big, "requirements.txt": "numpy\n"})
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: train.yaml is {len(TRAIN_YAML) + 2**20 + 1} bytes in commit "
        f"{sha[:8]}, more than the 1048576 bytes a train.yaml may have; fix: keep train.yaml "
        "small: it describes one training job\n"
    )
    repo, sha = git_repo({"train.yaml": TRAIN_YAML, "requirements.txt": big})
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: train.yaml:5: requirements: requirements.txt is 1048577 bytes in "
        f"commit {sha[:8]}, more than the 1048576 bytes requirements files may have together "
        "(this one and those it includes); fix: keep requirements files to package names and "
        "versions (a wheel or data does not belong in them)\n"
    )


def test_a_ci_commit_missing_from_the_clone(project: tuple[Path, str]) -> None:
    repo, _ = project
    missing = "0123456789abcdef0123456789abcdef01234567"
    result = run(["validate"], repo, {**ci_env(missing)})
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: no commit '{missing}' in {repo}; fix: pass --sha with a commit that "
        "exists here (git fetch it first if it was pushed from elsewhere)\n"
    )


def test_missing_train_yaml(project: tuple[Path, str]) -> None:
    repo, sha = project
    result = run(["validate", "--config", "nope.yaml"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: nope.yaml does not exist in commit {sha[:8]}; fix: commit it, or pass "
        "--config with the path of your train.yaml\n"
    )


def test_config_outside_the_repository(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = project
    result = run(["validate", "--config", str(tmp_path / "train.yaml")], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: --config {tmp_path / 'train.yaml'} is outside the repository {repo}; "
        "fix: pass the path of a train.yaml inside the repository\n"
    )


def test_outside_a_repository(tmp_path: Path) -> None:
    result = run(["render"], tmp_path)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: {tmp_path} is not inside a git repository; fix: run ci-runner from "
        "your project's checkout\n"
    )


def test_missing_ci_variables(project: tuple[Path, str]) -> None:
    repo, _ = project
    result = run(["render"], repo, {"GITLAB_CI": "true", "CI_JOB_ID": "1"})
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: GitLab CI variables missing: CI_COMMIT_SHA, CI_PROJECT_PATH; fix: run "
        "ci-runner in a GitLab CI job (GitLab sets them), or unset GITLAB_CI and CI_JOB_ID to "
        "run outside CI\n"
    )


def test_without_origin_render_asks_for_a_repository_url(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "requirements.txt": ""})
    result = run(["render"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: no repository URL for the pods to fetch the code from; fix: pass "
        "--repo-url https://<gitlab>/<group>/<project>.git, add an 'origin' remote, or run in "
        "GitLab CI\n"
    )


def test_repo_url_flag_overrides_origin_without_credentials(project: tuple[Path, str]) -> None:
    repo, _ = project
    result = run(["render", "--repo-url", f"https://u:{GIT_TOKEN}@git.example.org/x.git"], repo)
    assert result.code == 0
    worker = next(yaml.safe_load_all(result.stdout))["spec"]["mpiReplicaSpecs"]["Worker"]
    fetch = worker["template"]["spec"]["initContainers"][0]
    assert fetch["env"][0] == {
        "name": "CI_RUNNER_REPO_URL",
        "value": "https://git.example.org/x.git",
    }
    assert GIT_TOKEN not in result.stdout


URL_FIX = "fix: give the repository's https:// URL (or ssh://, or user@host:path)"


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_repo_url_git_would_run_is_one_line_and_nothing_rendered(
    project: tuple[Path, str], command: str
) -> None:
    repo, _ = project
    result = run([command, "--repo-url=--upload-pack=touch /tmp/x"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: the repository URL '--upload-pack=touch /tmp/x' (from --repo-url) "
        f"starts with '-', which git would take as an option; {URL_FIX}\n"
    )
    result = run([command, "--repo-url", "ext::sh%20-c%20id"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: the repository URL 'ext::sh%20-c%20id' (from --repo-url) uses git's "
        f"ext:: transport (which runs a command); {URL_FIX}\n"
    )


def test_an_http_repository_url_in_ci_is_refused_since_the_job_token_would_go_with_it(
    project: tuple[Path, str],
) -> None:
    repo, sha = project
    env = {
        **ci_env(sha),
        "CI_REPOSITORY_URL": f"http://gitlab-ci-token:{JOB_TOKEN}@gitlab.example.com/g/demo.git",
    }
    result = run(["render"], repo, env)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: the repository URL 'http://gitlab.example.com/g/demo.git' (from "
        "CI_REPOSITORY_URL) uses http://, which would send the git token (CI_JOB_TOKEN or "
        f"CI_RUNNER_GIT_TOKEN) in clear text; {URL_FIX}\n"
    )
    assert JOB_TOKEN not in result.stderr


def test_an_origin_on_the_local_disk_is_refused(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "requirements.txt": ""})
    run_git(["remote", "add", "origin", "/srv/git/demo.git"], repo)
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: the repository URL '/srv/git/demo.git' (from the origin remote) is "
        f"neither a URL nor user@host:path (a local path?); {URL_FIX}\n"
    )


SURROGATE_FIX = (
    "fix: write the character itself (or \\U0001F600-style escapes for one beyond U+FFFF)"
)


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_lone_surrogate_in_train_yaml_is_one_line_not_a_crash(
    git_repo: GitRepo, tmp_path: Path, command: str
) -> None:
    text = TRAIN_YAML + 'env: {A: "\\ud800", "\\udc80x": b}\n'
    repo, _ = git_repo({"train.yaml": text, "requirements.txt": ""})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    result = run([command], repo, crash_dir=tmp_path / "crash")
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: train.yaml:7: env.A: contains the escape \\ud800, a lone UTF-16 "
        f"surrogate that UTF-8 text cannot hold; {SURROGATE_FIX}\n"
        "ci-runner: error: train.yaml:7: env['\\udc80x']: contains the escape \\udc80, a lone "
        f"UTF-16 surrogate that UTF-8 text cannot hold; {SURROGATE_FIX}\n"
    )
    assert not (tmp_path / "crash").exists()


def test_a_ci_variable_that_is_not_utf8_is_one_line(project: tuple[Path, str]) -> None:
    repo, sha = project
    env = {**ci_env(sha), "CI_COMMIT_REF_NAME": "feature/\udcff"}  # os.environ's surrogateescape
    result = run(["render"], repo, env)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: CI_COMMIT_REF_NAME is not UTF-8 text; fix: leave it as GitLab sets it "
        "(UTF-8), or unset it\n"
    )


DAMAGED_FIX = (
    "fix: the clone is damaged: fetch again or clone afresh (git fsck names the damaged objects)"
)


def test_a_corrupt_or_missing_train_yaml_object_is_not_a_missing_file(
    project: tuple[Path, str],
) -> None:
    repo, sha = project
    oid = run_git(["rev-parse", f"{sha}:train.yaml"], repo)
    stored = f".git/objects/{oid[:2]}/{oid[2:]}"
    (repo / stored).chmod(0o644)
    (repo / stored).write_bytes(b"not zlib")
    # Its size is asked first (git cat-file -s), whose words name no object: git fsck does.
    expected = (
        f"ci-runner: error: train.yaml cannot be read from commit {sha[:8]} (fatal: git cat-file: "
        f"could not get object info); {DAMAGED_FIX}\n"
    )
    result = run(["validate"], repo)
    assert (result.code, result.stdout, result.stderr) == (1, "", expected)
    (repo / stored).unlink()
    result = run(["validate"], repo)
    assert (result.code, result.stdout, result.stderr) == (1, "", expected)


def test_a_committed_link_is_judged_by_its_target_in_the_commit(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"configs/train.yaml": TRAIN_YAML, "requirements.txt": "numpy\n"})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    (repo / "train.yaml").symlink_to("configs/train.yaml")  # inside: followed in the commit
    (repo / "passwd.yaml").symlink_to("/etc/passwd")
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "links"], repo)
    sha = run_git(["rev-parse", "HEAD"], repo)
    (repo / "configs" / "train.yaml").write_text("working tree: not the commit\n")
    assert run(["validate"], repo).code == 0
    result = run(["validate", "--config", "passwd.yaml"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: passwd.yaml is a symbolic link to '/etc/passwd' in commit {sha[:8]}, "
        "outside the repository; fix: commit the file itself, not a link to it\n"
    )


def test_a_requirements_link_out_of_the_repository_is_refused(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    (repo / "requirements.txt").symlink_to("../../etc/passwd")
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "link"], repo)
    sha = run_git(["rev-parse", "HEAD"], repo)
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: train.yaml:5: requirements: requirements.txt is a symbolic link to "
        f"'../../etc/passwd' in commit {sha[:8]}, outside the repository; fix: commit the file "
        "itself, not a link to it\n"
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("", "--config is empty; fix: pass the path of your train.yaml (by default train.yaml)"),
        (
            ".",
            "--config . is the repository's top directory; fix: pass the path of your train.yaml",
        ),
    ],
)
def test_a_config_that_names_no_file(project: tuple[Path, str], config: str, expected: str) -> None:
    repo, _ = project
    result = run(["validate", "--config", config], repo)
    assert (result.code, result.stdout, result.stderr) == (1, "", f"ci-runner: error: {expected}\n")


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_config_name_that_is_not_utf8_is_one_line(git_repo: GitRepo, command: str) -> None:
    repo, _ = git_repo({"requirements.txt": "numpy\n"})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    name = os.fsdecode(b"tr\xffin.yaml")  # as argv gives it: surrogateescape
    (repo / name).write_text(TRAIN_YAML)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "latin-1 name"], repo)
    result = run([command, "--config", name], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: --config 'tr\\udcffin.yaml' is not a UTF-8 file name (the manifest "
        "and every message name it); fix: rename the file\n"
    )


def test_a_directory_as_config(project: tuple[Path, str]) -> None:
    repo, sha = project
    result = run(["validate", "--config", "src"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        f"ci-runner: error: src is a directory in commit {sha[:8]}, not a file; fix: commit it, "
        "or pass --config with the path of your train.yaml\n"
    )


def test_a_missing_requirements_url_is_echoed_as_written_on_its_line(git_repo: GitRepo) -> None:
    text = TRAIN_YAML.replace("requirements.txt", "http://example.com/requirements.txt")
    repo, sha = git_repo({"train.yaml": text})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    result = run(["validate"], repo)
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == (
        "ci-runner: error: train.yaml:5: requirements: http://example.com/requirements.txt does "
        f"not exist in commit {sha[:8]}; fix: requirements names a file in the repository, not a "
        "URL: commit it and give its path\n"
    )


def _install(
    monkeypatch: pytest.MonkeyPatch, run: Callable[[argparse.Namespace, Runtime], int]
) -> None:
    monkeypatch.setattr(cli, "COMMANDS", [Command("boom", "fail", lambda parser: None, run)])


def test_a_bug_writes_a_crash_log_and_says_where(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def explode(args: argparse.Namespace, runtime: Runtime) -> int:
        raise ValueError(f"token {runtime.settings.environ['CI_JOB_TOKEN']} broke\nsecond line")

    _install(monkeypatch, explode)
    result = run(["boom"], tmp_path, {"CI_JOB_TOKEN": JOB_TOKEN}, crash_dir=tmp_path / "crash")
    (log,) = (tmp_path / "crash").iterdir()
    assert (result.code, result.stdout) == (3, "")
    assert result.stderr == (
        "ci-runner: error: internal error (ValueError: token [MASKED] broke); the traceback is in "
        f"{log}: please attach it to a bug report\n"
    )
    text = log.read_text()
    assert text.startswith(f"{cli.versions()}\nTraceback (most recent call last):\n")
    assert "ValueError: token [MASKED] broke\nsecond line\n" in text
    assert JOB_TOKEN not in text


def test_crash_log_versions_name_ci_runner_python_platform_and_git() -> None:
    lines = cli.versions().splitlines()
    assert lines[0] == f"ci-runner {__version__}"
    assert lines[1] == f"Python {platform.python_implementation()} {platform.python_version()}"
    assert lines[2] == f"platform {platform.platform()}"
    assert re.fullmatch(r"git version \d+\.\d+.*", lines[3])
    assert len(lines) == 4


def test_a_chained_cause_reaches_the_crash_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def explode(args: argparse.Namespace, runtime: Runtime) -> int:
        try:
            raise OSError("disk gone")
        except OSError as error:
            raise RuntimeError("could not save") from error

    _install(monkeypatch, explode)
    result = run(["boom"], tmp_path, crash_dir=tmp_path / "crash")
    (log,) = (tmp_path / "crash").iterdir()
    assert result.code == 3
    text = log.read_text()
    assert "OSError: disk gone\n\nThe above exception was the direct cause" in text
    assert text.rstrip().endswith("RuntimeError: could not save")


def test_an_expected_error_exits_with_its_code_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(args: argparse.Namespace, runtime: Runtime) -> int:
        try:
            raise ValueError("library detail")
        except ValueError as error:
            raise GitError("no such commit; fix: push it") from error

    _install(monkeypatch, refuse)
    result = run(["boom"], tmp_path, crash_dir=tmp_path / "crash")
    assert (result.code, result.stdout, result.stderr) == (
        1,
        "",
        "ci-runner: error: no such commit; fix: push it\n",
    )
    assert not (tmp_path / "crash").exists()


def test_interrupted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupt(args: argparse.Namespace, runtime: Runtime) -> int:
        raise KeyboardInterrupt

    _install(monkeypatch, interrupt)
    result = run(["boom"], tmp_path)
    assert (result.code, result.stdout, result.stderr) == (
        130,
        "",
        "ci-runner: error: interrupted\n",
    )


def test_a_registered_command_gets_the_runtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def hello(args: argparse.Namespace, runtime: Runtime) -> int:
        runtime.stdout.write(f"{runtime.cwd} {runtime.settings.environ['X']}\n")
        return 3

    _install(monkeypatch, hello)
    result = run(["boom"], tmp_path, {"X": "y"})
    assert (result.code, result.stdout, result.stderr) == (3, f"{tmp_path} y\n", "")


def test_usage_errors_exit_2_on_stderr(tmp_path: Path) -> None:
    result = run(["frobnicate"], tmp_path)
    assert (result.code, result.stdout) == (2, "")
    choices = ", ".join(repr(command.name) for command in cli.COMMANDS)
    assert result.stderr.splitlines()[-1] == (
        f"ci-runner: error: argument COMMAND: invalid choice: 'frobnicate' (choose from {choices})"
    )
    assert choices.startswith("'validate', 'render'")


def test_help_and_version_on_stdout(tmp_path: Path) -> None:
    result = run(["--help"], tmp_path)
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: ci-runner [-h] [--version] COMMAND ...\n")
    assert "    validate  check train.yaml at the commit" in result.stdout
    assert run(["--version"], tmp_path).stdout == f"ci-runner {__version__}\n"


def test_python_dash_m(project: tuple[Path, str]) -> None:
    repo, sha = project
    proc = subprocess.run(
        [sys.executable, "-m", "ci_runner", "validate"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(repo)},
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(f"[ci-runner] train.yaml at {sha[:8]} is valid")
