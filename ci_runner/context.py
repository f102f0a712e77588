"""Where and why ci-runner runs: GitLab's predefined CI variables, or flags and git outside CI.

Built once at the edge (``from_environment``) and passed in; nothing deeper reads ``os.environ``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from ci_runner import variables
from ci_runner.errors import EnvironmentSetupError, GitError
from ci_runner.gitrepo import git, repo_root, resolve_commit


def gitlab_tokens(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each of :data:`~ci_runner.variables.GITLAB_TOKEN_VARIABLES` that is set, as (name, value),
    in lookup order."""
    found = ((name, env.get(name, "").strip()) for name in variables.GITLAB_TOKEN_VARIABLES)
    return [(name, value) for name, value in found if value]


@dataclass(frozen=True)
class CIContext:
    """The commit being trained and the pipeline/job/MR it belongs to.

    Outside GitLab CI most fields are None; ``sha`` (full 40-hex) and ``project_path`` always exist.
    """

    sha: str
    project_path: str
    project_id: str | None = None
    project_url: str | None = None
    server_url: str | None = None
    api_url: str | None = None  # CI_API_V4_URL as GitLab gives it
    pipeline_id: str | None = None
    pipeline_source: str | None = None
    job_id: str | None = None
    job_url: str | None = None
    # CI_JOB_STATUS: how the CI job ended, in after_script (``canceled``, ``timedout``): what
    # ``ci-runner cancel`` reports.
    job_status: str | None = None
    ref_name: str | None = None
    mr_iid: str | None = None
    mr_target_branch: str | None = None
    default_branch: str | None = None
    ci_job_name: str | None = None  # the CI job's name: where the target branch's baseline is
    mr_project_id: str | None = None  # the project the MR targets
    mr_source_project_id: str | None = None  # differs from mr_project_id for a fork's MR
    mr_project_path: str | None = None
    mr_source_project_path: str | None = None
    # A branch pipeline's open MRs from this branch: up to 4 ``path!iid``, comma-separated.
    open_merge_requests: str | None = None
    # What pods `git fetch` from (HTTPS; credentials come from a Secret), and where it was found
    # (--repo-url, CI_REPOSITORY_URL, CI_PROJECT_URL, the origin remote), for messages.
    repo_url: str | None = None
    repo_url_from: str = ""

    @property
    def api_v4_url(self) -> str | None:
        """GitLab's REST API root without a trailing slash: ``CI_API_V4_URL``, else the
        server's ``/api/v4``."""
        if self.api_url and self.api_url.strip():
            return self.api_url.strip().rstrip("/")
        return self.server_url.rstrip("/") + "/api/v4" if self.server_url else None

    @property
    def short_sha(self) -> str:
        return self.sha[:8]

    @property
    def from_fork(self) -> bool:
        """Whether this is a merge request pipeline for a branch of another project (a fork)."""
        return bool(
            self.mr_source_project_id
            and self.mr_project_id
            and self.mr_source_project_id != self.mr_project_id
        )

    @property
    def in_ci(self) -> bool:
        return self.job_id is not None


# The GitLab predefined variables this object is built from, with the field each one fills.
CI_VARIABLES: Final[Mapping[str, str]] = {
    variables.CI_COMMIT_SHA: "sha",
    variables.CI_PROJECT_PATH: "project_path",
    variables.CI_PROJECT_ID: "project_id",
    variables.CI_PROJECT_URL: "project_url",
    variables.CI_SERVER_URL: "server_url",
    variables.CI_API_V4_URL: "api_url",
    variables.CI_PIPELINE_ID: "pipeline_id",
    variables.CI_PIPELINE_SOURCE: "pipeline_source",
    variables.CI_JOB_ID: "job_id",
    variables.CI_JOB_URL: "job_url",
    variables.CI_COMMIT_REF_NAME: "ref_name",
    variables.CI_MERGE_REQUEST_IID: "mr_iid",
    variables.CI_MERGE_REQUEST_TARGET_BRANCH_NAME: "mr_target_branch",
    variables.CI_DEFAULT_BRANCH: "default_branch",
    variables.CI_JOB_NAME: "ci_job_name",
    variables.CI_MERGE_REQUEST_PROJECT_ID: "mr_project_id",
    variables.CI_MERGE_REQUEST_SOURCE_PROJECT_ID: "mr_source_project_id",
    variables.CI_MERGE_REQUEST_PROJECT_PATH: "mr_project_path",
    variables.CI_MERGE_REQUEST_SOURCE_PROJECT_PATH: "mr_source_project_path",
    variables.CI_OPEN_MERGE_REQUESTS: "open_merge_requests",
}

# The CI job's time limit: GitLab's (15.7+) timeout in seconds and start (ISO 8601, UTC), and
# GitLab Runner's limit of the script (a Go duration) when the job sets one.
JOB_TIMEOUT_VARIABLE: Final = variables.CI_JOB_TIMEOUT
SCRIPT_TIMEOUT_VARIABLE: Final = variables.RUNNER_SCRIPT_TIMEOUT
JOB_STARTED_VARIABLE: Final = variables.CI_JOB_STARTED_AT


@dataclass(frozen=True)
class JobTimeVariables:
    """The CI job's time limit as GitLab and GitLab Runner give it, each as written (spaces
    around removed; "" when unset): what :mod:`ci_runner.plan.deadline` reads it from."""

    timeout: str  # CI_JOB_TIMEOUT
    script_timeout: str  # RUNNER_SCRIPT_TIMEOUT
    started_at: str  # CI_JOB_STARTED_AT


def job_time_variables(env: Mapping[str, str]) -> JobTimeVariables:
    """The CI job's time-limit variables in ``env``."""
    return JobTimeVariables(
        timeout=env.get(JOB_TIMEOUT_VARIABLE, "").strip(),
        script_timeout=env.get(SCRIPT_TIMEOUT_VARIABLE, "").strip(),
        started_at=env.get(JOB_STARTED_VARIABLE, "").strip(),
    )


# Variables whose presence means "running inside a GitLab CI job".
_CI_MARKERS: Final = (variables.GITLAB_CI, variables.CI_JOB_ID)
# Without these a CI context cannot name the job or the commit.
_REQUIRED_IN_CI: Final = (variables.CI_COMMIT_SHA, variables.CI_PROJECT_PATH, variables.CI_JOB_ID)
_FULL_SHA: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SCP_LIKE: Final = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>[^/].*)$")
ORIGIN: Final = "the origin remote"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# Where the pods may fetch from. https:// and ssh:// (or scp-like user@host:path) authenticate
# the server and encrypt; http:// only while no git credential goes with it; git:// (neither
# encrypted nor authenticated, though it carries no credential: git asks a credential helper
# only over HTTP) only when the project opts in, for a git daemon on a network it trusts.
ALLOW_GIT_PROTOCOL: Final = variables.CI_RUNNER_ALLOW_GIT_PROTOCOL
_URL_FIX: Final = "give the repository's https:// URL (or ssh://, or user@host:path)"
_SCHEME: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
_SCP_URL: Final = re.compile(r"[^@/:\s]+@(?P<host>[^@/:\s]+):[^\s]+")
_TRANSPORT: Final = re.compile(r"(?P<transport>[A-Za-z0-9+.-]+)::")
CACHE_VARIABLE: Final = variables.CI_RUNNER_CACHE
# The spellings of a yes/no variable ci-runner reads (any case): GitLab's boolean component
# inputs render as "true"/"false"; "1" and "yes" are what a shell user writes.
TRUE_SPELLINGS: Final = frozenset({"1", "true", "yes"})
FALSE_SPELLINGS: Final = frozenset({"0", "false", "no"})
# How the CI job ended, as after_script sees it (``canceled``, ``timedout``): CIContext.job_status.
JOB_STATUS_VARIABLE: Final = variables.CI_JOB_STATUS


def from_environment(env: Mapping[str, str], cwd: Path, *, sha: str | None = None) -> CIContext:
    """The context of this run: GitLab's predefined variables in CI, the local git repo outside.

    ``sha`` (``--sha``) overrides ``CI_COMMIT_SHA`` / ``HEAD`` and is resolved to a full SHA.
    """
    if any(env.get(name) for name in _CI_MARKERS):
        context = _from_gitlab(env, cwd, sha)
    else:
        context = _from_git(cwd, sha)
    # Read wherever it is set: an after_script run by hand (or by a local runner) says it too.
    return replace(context, job_status=env.get(JOB_STATUS_VARIABLE) or None)


def _from_gitlab(env: Mapping[str, str], cwd: Path, sha: str | None) -> CIContext:
    for var in (*CI_VARIABLES, variables.CI_REPOSITORY_URL):
        if _SURROGATE.search(env.get(var, "")):  # bytes that were not UTF-8 (surrogateescape)
            raise EnvironmentSetupError(
                f"{var} is not UTF-8 text; fix: leave it as GitLab sets it (UTF-8), or unset it"
            )
    values = {field: env.get(var) or None for var, field in CI_VARIABLES.items()}
    required = [v for v in _REQUIRED_IN_CI if not (sha and v == variables.CI_COMMIT_SHA)]
    missing = [v for v in required if not env.get(v)]
    if missing:
        raise EnvironmentSetupError(
            f"GitLab CI variables missing: {', '.join(missing)}; fix: run ci-runner in a GitLab "
            "CI job (GitLab sets them), or unset GITLAB_CI and CI_JOB_ID to run outside CI"
        )
    if sha:
        values["sha"] = resolve_commit(sha, cwd)
    elif not _FULL_SHA.fullmatch(values["sha"] or ""):
        raise EnvironmentSetupError(
            f"CI_COMMIT_SHA {values['sha']!r} is not a full commit SHA; fix: leave CI_COMMIT_SHA "
            "as GitLab sets it, or pass --sha"
        )
    repo_url = without_credentials(env.get(variables.CI_REPOSITORY_URL) or "")
    source = variables.CI_REPOSITORY_URL
    if not repo_url and env.get(variables.CI_PROJECT_URL):
        repo_url = env[variables.CI_PROJECT_URL].rstrip("/") + ".git"
        source = variables.CI_PROJECT_URL
    if not repo_url:
        repo_url = _origin_url(cwd)
        source = ORIGIN
    fields = {k: v for k, v in values.items() if k not in ("sha", "project_path")}
    return CIContext(
        sha=values["sha"] or "",
        project_path=values["project_path"] or "",
        repo_url=repo_url or None,
        repo_url_from=source,
        **fields,
    )


def _from_git(cwd: Path, sha: str | None) -> CIContext:
    root = repo_root(cwd)
    full_sha = resolve_commit(sha or "HEAD", root)
    origin = _origin_url(root)
    project_path = _project_path(origin) if origin else None
    try:
        branch = git(["symbolic-ref", "--quiet", "--short", "HEAD"], root).strip() or None
    except GitError:  # detached HEAD
        branch = None
    return CIContext(
        sha=full_sha,
        project_path=project_path or root.name,
        ref_name=branch,
        repo_url=origin or None,
        repo_url_from=ORIGIN,
    )


def _origin_url(cwd: Path) -> str:
    """The ``origin`` remote as an HTTPS URL for pods, credentials removed; "" if none."""
    try:
        url = git(["config", "--get", "remote.origin.url"], cwd).strip()
    except GitError:
        return ""
    return without_credentials(_as_https(url))


def _as_https(url: str) -> str:
    # Pods authenticate over HTTPS (user + token from a Secret), so an SSH remote becomes the
    # same host and path over HTTPS, which is how GitLab serves both.
    if url.startswith("ssh://"):
        parts = urlsplit(url)
        return urlunsplit(("https", parts.hostname or "", parts.path, "", ""))
    match = _SCP_LIKE.match(url)
    if match and "://" not in url:
        return f"https://{match['host']}/{match['path']}"
    return url


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` removed (CI_REPOSITORY_URL embeds the job token)."""
    if not url:
        return ""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _project_path(url: str) -> str | None:
    """``group/project`` from a remote URL (``https://host/group/project.git``)."""
    path = urlsplit(url).path if "://" in url else url
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    return path or None


def repo_url_problem(url: str, *, credential: bool, git_protocol: bool = False) -> str | None:
    """What is wrong with ``url`` as the pods' ``git fetch`` source ("what; fix: ..."), or
    None: ``credential`` says a git token goes with the fetch (the job's Secret has one),
    ``git_protocol`` that the project allows git://."""
    if url.startswith("-"):
        return f"starts with '-', which git would take as an option; fix: {_URL_FIX}"
    if any(c.isspace() or not c.isprintable() for c in url):
        return f"contains spaces or control characters; fix: {_URL_FIX}"
    transport = _TRANSPORT.match(url)
    if transport:
        name = transport["transport"]
        what = "which runs a command" if name.lower() == "ext" else "a git remote helper"
        return f"uses git's {name}:: transport ({what}); fix: {_URL_FIX}"
    scheme = _SCHEME.fullmatch(url)
    if scheme is None:
        scp = _SCP_URL.fullmatch(url)
        if scp is None:
            return f"is neither a URL nor user@host:path (a local path?); fix: {_URL_FIX}"
        if scp["host"].startswith("-"):
            return f"names a host starting with '-'; fix: {_URL_FIX}"
        return None
    name = scheme["scheme"].lower()
    host = urlsplit(url).hostname or ""
    if name in ("https", "ssh", "http", "git") and (not host or host.startswith("-")):
        return f"has no host, or one starting with '-'; fix: {_URL_FIX}"
    if name in ("https", "ssh"):
        return None
    if name == "http":
        if not credential:
            return None
        return (
            "uses http://, which would send the git token (CI_JOB_TOKEN or "
            f"CI_RUNNER_GIT_TOKEN) in clear text; fix: {_URL_FIX}"
        )
    if name == "git" and git_protocol:
        return None
    if name == "git":
        return (
            "uses git://, which is neither encrypted nor authenticated; fix: "
            f"{_URL_FIX}, or set {ALLOW_GIT_PROTOCOL}=1 for a git daemon on a network you trust"
        )
    return f"uses {name}://, which the pods do not fetch from; fix: {_URL_FIX}"


def env_flag(value: str | None, default: bool) -> bool:
    """A yes/no variable's value: one of :data:`TRUE_SPELLINGS` is true, of
    :data:`FALSE_SPELLINGS` false (any case, spaces around ignored); unset, empty or anything
    else is ``default``."""
    word = (value or "").strip().lower()
    if word in TRUE_SPELLINGS:
        return True
    if word in FALSE_SPELLINGS:
        return False
    return default


def cache_dir(env: Mapping[str, str]) -> Path:
    """ci-runner's cache on this machine: ``$CI_RUNNER_CACHE``, else
    ``$XDG_CACHE_HOME/ci-runner``, else ``~/.cache/ci-runner``.

    ``--local``'s worktrees and virtualenvs, and what ``make`` downloads (scripts/lib/cache.sh
    says the same in sh), live there.
    """
    if env.get(CACHE_VARIABLE):
        return Path(env[CACHE_VARIABLE])
    if env.get(variables.XDG_CACHE_HOME):
        return Path(env[variables.XDG_CACHE_HOME]) / "ci-runner"
    return Path(env.get(variables.HOME) or Path.home()) / ".cache" / "ci-runner"
