"""The ``CI_*`` variables GitLab gives a job, per pipeline kind, for tests that play a CI job
against the fake GitLab.

Rules, from GitLab's source (gitlabhq/gitlabhq) and doc/ci/variables/predefined_variables.md:

- Every job: ``CI``, ``GITLAB_CI``, the server, project, commit, pipeline and job variables;
  ``CI_JOB_TIMEOUT`` (seconds, GitLab 15.7+) and ``CI_JOB_STARTED_AT`` (ISO 8601, UTC)
  (lib/gitlab/ci/variables/builder.rb, app/models/ci/build.rb).
- ``CI_COMMIT_BRANCH`` only in branch pipelines, never in merge-request pipelines
  (lib/gitlab/ci/variables/builder/pipeline.rb: ``branch?``).
- ``CI_MERGE_REQUEST_*`` only in merge-request pipelines (``MergeRequest#predefined_variables``,
  app/models/merge_request.rb); ``CI_COMMIT_REF_NAME`` is then the source branch.
- ``CI_OPEN_MERGE_REQUESTS``: up to 4 open MRs from this source project and branch, newest id
  first, as full references ``group/project!iid``, and only when there is one
  (``Ci::Pipeline#open_merge_requests_refs``, app/models/ci/pipeline.rb; MAX 4).
- ``CI_JOB_IMAGE``: the job's image, only when the job has one (predefined_variables.md: "The
  name of the Docker image running the job").
- ``CI_COMMIT_REF_PROTECTED``: ``true`` or ``false``, whether the ref is protected
  (predefined_variables.md; ``Ci::Pipeline#protected_ref?``, app/models/ci/pipeline.rb). A
  merge-request pipeline's ref, ``refs/merge-requests/<iid>/head``, is never protected.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Final

from testing.fake_gitlab.model import MergeRequest, Project

MAX_OPEN_MERGE_REQUESTS_REFS: Final = 4
BRANCH_SOURCES: Final = ("push", "web", "schedule", "api", "trigger")


def open_merge_requests(project: Project, branch: str) -> str | None:
    """``CI_OPEN_MERGE_REQUESTS`` for a pipeline of ``branch`` in ``project``."""
    related = [
        mr
        for mr in project.merge_requests.values()
        if mr.source_branch == branch and mr.state == "opened" and mr.source_project_id is None
    ]
    related.sort(key=lambda mr: -mr.id)
    refs = [f"{project.path}!{mr.iid}" for mr in related[:MAX_OPEN_MERGE_REQUESTS_REFS]]
    return ",".join(refs) or None


def job_variables(
    base: str,
    project: Project,
    *,
    source: str,
    sha: str,
    job_id: int,
    pipeline_id: int,
    branch: str | None = None,
    mr: MergeRequest | None = None,
    job_name: str = "train",
    timeout_seconds: int = 3600,
    started_at: datetime | None = None,
    image: str | None = None,
    protected: bool = False,
) -> dict[str, str]:
    """A job's predefined variables: a branch pipeline (``source`` push, web, ...) of
    ``branch``, or (``source`` merge_request_event) the pipeline of ``mr``."""
    project_url = f"{base}/{project.path}"
    started = started_at or datetime.now(timezone.utc)
    ref = mr.source_branch if mr is not None else branch
    if ref is None:
        raise ValueError("a pipeline needs a branch or a merge request")
    variables = {
        "CI": "true",
        "GITLAB_CI": "true",
        "CI_SERVER_URL": base,
        "CI_PROJECT_ID": str(project.id),
        "CI_PROJECT_PATH": project.path,
        "CI_PROJECT_URL": project_url,
        "CI_DEFAULT_BRANCH": project.default_branch,
        "CI_COMMIT_SHA": sha,
        "CI_COMMIT_REF_NAME": ref,
        "CI_PIPELINE_ID": str(pipeline_id),
        "CI_PIPELINE_SOURCE": source,
        "CI_JOB_ID": str(job_id),
        "CI_JOB_NAME": job_name,
        "CI_JOB_URL": f"{project_url}/-/jobs/{job_id}",
        "CI_JOB_STATUS": "running",
        "CI_JOB_TIMEOUT": str(timeout_seconds),
        "CI_JOB_STARTED_AT": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "CI_COMMIT_REF_PROTECTED": str(protected and source != "merge_request_event").lower(),
    }
    if image is not None:
        variables["CI_JOB_IMAGE"] = image
    if source == "merge_request_event":
        if mr is None:
            raise ValueError("a merge-request pipeline needs its merge request")
        variables |= {
            "CI_MERGE_REQUEST_IID": str(mr.iid),
            "CI_MERGE_REQUEST_ID": str(mr.id),
            "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": mr.target_branch,
            "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": mr.source_branch,
            "CI_MERGE_REQUEST_PROJECT_ID": str(project.id),
            "CI_MERGE_REQUEST_PROJECT_PATH": project.path,
            "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": str(mr.source_project_id or project.id),
        }
    elif source in BRANCH_SOURCES:
        variables["CI_COMMIT_BRANCH"] = ref
    else:
        raise ValueError(f"no pipeline kind {source!r} here")
    opened = open_merge_requests(project, ref)
    if opened:
        variables["CI_OPEN_MERGE_REQUESTS"] = opened
    return variables
