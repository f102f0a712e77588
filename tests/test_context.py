"""CIContext from GitLab's predefined variables, or from the local git repository outside CI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci_runner.context import (
    ORIGIN,
    CIContext,
    JobTimeVariables,
    cache_dir,
    from_environment,
    gitlab_tokens,
    job_time_variables,
    repo_url_problem,
    without_credentials,
)
from ci_runner.errors import EnvironmentSetupError, GitError
from ci_runner.settings import read_settings
from testing.git import run_git

SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "glcbt-canary-secret-9d2e"
GitRepo = Callable[[dict[str, str]], tuple[Path, str]]

CI_ENV = {
    "GITLAB_CI": "true",
    "CI_COMMIT_SHA": SHA,
    "CI_PROJECT_PATH": "group/sub/project",
    "CI_PROJECT_ID": "42",
    "CI_PROJECT_URL": "https://gitlab.example.com/group/sub/project",
    "CI_SERVER_URL": "https://gitlab.example.com",
    "CI_PIPELINE_ID": "1001",
    "CI_PIPELINE_SOURCE": "merge_request_event",
    "CI_JOB_ID": "5005",
    "CI_JOB_URL": "https://gitlab.example.com/group/sub/project/-/jobs/5005",
    "CI_COMMIT_REF_NAME": "feature/x",
    "CI_MERGE_REQUEST_IID": "7",
    "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
    "CI_DEFAULT_BRANCH": "main",
    "CI_REPOSITORY_URL": f"https://gitlab-ci-token:{TOKEN}@gitlab.example.com/group/sub/project.git",
    "CI_JOB_TOKEN": TOKEN,
}


def test_in_ci_every_field_comes_from_the_predefined_variables(tmp_path: Path) -> None:
    assert from_environment(CI_ENV, tmp_path) == CIContext(
        sha=SHA,
        project_path="group/sub/project",
        project_id="42",
        project_url="https://gitlab.example.com/group/sub/project",
        server_url="https://gitlab.example.com",
        pipeline_id="1001",
        pipeline_source="merge_request_event",
        job_id="5005",
        job_url="https://gitlab.example.com/group/sub/project/-/jobs/5005",
        ref_name="feature/x",
        mr_iid="7",
        mr_target_branch="main",
        default_branch="main",
        repo_url="https://gitlab.example.com/group/sub/project.git",
        repo_url_from="CI_REPOSITORY_URL",
    )


def test_in_ci_the_token_never_reaches_the_context(tmp_path: Path) -> None:
    assert TOKEN not in repr(from_environment(CI_ENV, tmp_path))


def test_in_ci_empty_variables_are_none(tmp_path: Path) -> None:
    env = {**CI_ENV, "CI_MERGE_REQUEST_IID": "", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": ""}
    ctx = from_environment(env, tmp_path)
    assert (ctx.mr_iid, ctx.mr_target_branch) == (None, None)


def test_in_ci_without_repository_url_the_project_url_is_used(tmp_path: Path) -> None:
    env = {k: v for k, v in CI_ENV.items() if k != "CI_REPOSITORY_URL"}
    ctx = from_environment(env, tmp_path)
    assert ctx.repo_url == "https://gitlab.example.com/group/sub/project.git"


def test_in_ci_job_id_alone_means_ci(tmp_path: Path) -> None:
    env = {k: v for k, v in CI_ENV.items() if k != "GITLAB_CI"}
    assert from_environment(env, tmp_path).in_ci


def test_in_ci_missing_variables_are_named_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSetupError) as raised:
        from_environment({"GITLAB_CI": "true", "CI_PROJECT_PATH": "g/p"}, tmp_path)
    assert raised.value.lines() == [
        "GitLab CI variables missing: CI_COMMIT_SHA, CI_JOB_ID; fix: run ci-runner in a GitLab "
        "CI job (GitLab sets them), or unset GITLAB_CI and CI_JOB_ID to run outside CI"
    ]


def test_in_ci_a_short_commit_sha_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSetupError) as raised:
        from_environment({**CI_ENV, "CI_COMMIT_SHA": "0123abcd"}, tmp_path)
    assert str(raised.value) == (
        "CI_COMMIT_SHA '0123abcd' is not a full commit SHA; fix: leave CI_COMMIT_SHA as GitLab "
        "sets it, or pass --sha"
    )


def test_in_ci_sha_flag_overrides_the_commit_and_is_resolved(git_repo: GitRepo) -> None:
    repo, first = git_repo({"a.txt": "1"})
    _, _second = git_repo({"a.txt": "2"})
    env = {k: v for k, v in CI_ENV.items() if k != "CI_COMMIT_SHA"}
    assert from_environment(env, repo, sha="HEAD~1").sha == first


def test_outside_ci_head_and_branch_of_the_local_repository(git_repo: GitRepo) -> None:
    repo, sha = git_repo({"train.yaml": "name: x\n"})
    assert from_environment({}, repo) == CIContext(
        sha=sha, project_path="repo", ref_name="main", repo_url=None, repo_url_from=ORIGIN
    )


def test_the_jobs_status_in_after_script_is_read_in_ci_and_out(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"train.yaml": "name: x\n"})
    assert from_environment({**CI_ENV, "CI_JOB_STATUS": "timedout"}, repo).job_status == (
        "timedout"
    )
    assert from_environment({"CI_JOB_STATUS": "canceled"}, repo).job_status == "canceled"
    assert from_environment({**CI_ENV, "CI_JOB_STATUS": ""}, repo).job_status is None


def test_outside_ci_from_a_subdirectory_with_an_abbreviated_sha(git_repo: GitRepo) -> None:
    repo, first = git_repo({"sub/a.txt": "1"})
    git_repo({"sub/a.txt": "2"})
    assert from_environment({}, repo / "sub", sha=first[:7]).sha == first


@pytest.mark.parametrize(
    ("origin", "project_path", "repo_url"),
    [
        (
            "https://gitlab.example.com/group/project.git",
            "group/project",
            "https://gitlab.example.com/group/project.git",
        ),
        (
            f"https://oauth2:{TOKEN}@gitlab.example.com/group/sub/project.git",
            "group/sub/project",
            "https://gitlab.example.com/group/sub/project.git",
        ),
        (
            "git@gitlab.example.com:group/project.git",
            "group/project",
            "https://gitlab.example.com/group/project.git",
        ),
        (
            "ssh://git@gitlab.example.com:2222/group/project.git",
            "group/project",
            "https://gitlab.example.com/group/project.git",
        ),
    ],
)
def test_outside_ci_project_and_url_from_the_origin_remote(
    git_repo: GitRepo, origin: str, project_path: str, repo_url: str
) -> None:
    repo, _ = git_repo({"a": "1"})
    run_git(["remote", "add", "origin", origin], repo)
    ctx = from_environment({}, repo)
    assert (ctx.project_path, ctx.repo_url) == (project_path, repo_url)


def test_outside_ci_detached_head_has_no_branch(git_repo: GitRepo) -> None:
    repo, sha = git_repo({"a": "1"})
    run_git(["checkout", "-q", "--detach", sha], repo)
    assert from_environment({}, repo).ref_name is None


def test_outside_ci_an_unknown_revision_is_a_git_error(git_repo: GitRepo) -> None:
    repo, _ = git_repo({"a": "1"})
    with pytest.raises(GitError) as raised:
        from_environment({}, repo, sha="no-such-branch")
    assert str(raised.value) == (
        f"no commit 'no-such-branch' in {repo}; fix: pass --sha with a commit that exists here "
        "(git fetch it first if it was pushed from elsewhere)"
    )


def test_outside_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError) as raised:
        from_environment({}, tmp_path)
    assert str(raised.value) == (
        f"{tmp_path} is not inside a git repository; fix: run ci-runner from your project's "
        "checkout"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("", ""),
        ("https://host/g/p.git", "https://host/g/p.git"),
        ("https://user:pass@host:8443/g/p.git", "https://host:8443/g/p.git"),
        ("https://token@host/g/p.git", "https://host/g/p.git"),
    ],
)
def test_without_credentials(url: str, expected: str) -> None:
    assert without_credentials(url) == expected


FIX = "fix: give the repository's https:// URL (or ssh://, or user@host:path)"


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.example.com/group/project.git",
        "ssh://git@gitlab.example.com:2222/group/project.git",
        "git@gitlab.example.com:group/project.git",
        "http://gitlab.example.com/group/project.git",  # no token goes with it
    ],
)
def test_repository_urls_the_pods_may_fetch_from(url: str) -> None:
    assert repo_url_problem(url, credential=False) is None


@pytest.mark.parametrize(
    ("url", "credential", "expected"),
    [
        (
            "--upload-pack=touch /tmp/pwned",
            False,
            f"starts with '-', which git would take as an option; {FIX}",
        ),
        ("ext::sh -c id", False, f"contains spaces or control characters; {FIX}"),
        ("ext::sh%20-c%20id", False, f"uses git's ext:: transport (which runs a command); {FIX}"),
        ("file::/srv/repo.git", False, f"uses git's file:: transport (a git remote helper); {FIX}"),
        ("fd::3", False, f"uses git's fd:: transport (a git remote helper); {FIX}"),
        ("file:///srv/repo.git", False, f"uses file://, which the pods do not fetch from; {FIX}"),
        (
            "ftp://example.com/repo.git",
            False,
            f"uses ftp://, which the pods do not fetch from; {FIX}",
        ),
        (
            "/srv/repo.git",
            False,
            f"is neither a URL nor user@host:path (a local path?); {FIX}",
        ),
        (
            "ssh://-oProxyCommand=id/x.git",
            False,
            f"has no host, or one starting with '-'; {FIX}",
        ),
        ("git@-oProxyCommand=id:x.git", False, f"names a host starting with '-'; {FIX}"),
        (
            "http://gitlab.example.com/g/p.git",
            True,
            "uses http://, which would send the git token (CI_JOB_TOKEN or CI_RUNNER_GIT_TOKEN) "
            f"in clear text; {FIX}",
        ),
        (
            "git://gitlab.example.com/g/p.git",
            False,
            "uses git://, which is neither encrypted nor authenticated; fix: give the "
            "repository's https:// URL (or ssh://, or user@host:path), or set "
            "CI_RUNNER_ALLOW_GIT_PROTOCOL=1 for a git daemon on a network you trust",
        ),
    ],
)
def test_repository_urls_the_pods_must_not_fetch_from(
    url: str, credential: bool, expected: str
) -> None:
    assert repo_url_problem(url, credential=credential) == expected


def test_git_protocol_when_the_project_allows_it() -> None:
    url = "git://10.98.76.1:9418/g/p.git"
    assert repo_url_problem(url, credential=True, git_protocol=True) is None


def test_the_gitlab_token_is_ci_runners_variable_else_gitlab_token() -> None:
    both = {"CI_RUNNER_GITLAB_TOKEN": " own ", "GITLAB_TOKEN": "other", "CI_JOB_TOKEN": "job"}
    assert read_settings(both).gitlab_token == ("CI_RUNNER_GITLAB_TOKEN", "own")
    assert gitlab_tokens(both) == [("CI_RUNNER_GITLAB_TOKEN", "own"), ("GITLAB_TOKEN", "other")]
    assert read_settings({"CI_RUNNER_GITLAB_TOKEN": " ", "GITLAB_TOKEN": "other"}).gitlab_token == (
        "GITLAB_TOKEN",
        "other",
    )
    assert read_settings({"CI_JOB_TOKEN": "job"}).gitlab_token is None


def test_the_api_root_is_ci_api_v4_url_else_the_servers() -> None:
    given = CIContext(
        "0" * 40,
        "g/p",
        server_url="https://gl.example.com/",
        api_url=" https://gl.example.com/x/api/v4/ ",
    )
    assert given.api_v4_url == "https://gl.example.com/x/api/v4"
    assert CIContext("0" * 40, "g/p", server_url="https://gl.example.com/").api_v4_url == (
        "https://gl.example.com/api/v4"
    )
    assert CIContext("0" * 40, "g/p").api_v4_url is None


def test_the_ci_jobs_time_limit_is_read_as_written() -> None:
    env = {"CI_JOB_TIMEOUT": " 3600 ", "RUNNER_SCRIPT_TIMEOUT": "55m", "CI_JOB_STARTED_AT": "x"}
    assert job_time_variables(env) == JobTimeVariables("3600", "55m", "x")
    assert job_time_variables({}) == JobTimeVariables("", "", "")


def test_cache_dir_follows_the_environment() -> None:
    assert cache_dir({"CI_RUNNER_CACHE": "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    assert cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/ci-runner")
    assert cache_dir({"HOME": "/h"}) == Path("/h/.cache/ci-runner")
