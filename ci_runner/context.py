"""Where and why ci-runner runs: GitLab's predefined CI variables, or flags and git outside CI.

Built once at the edge (``from_environment``) and passed in; nothing deeper reads ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
    pipeline_id: str | None = None
    pipeline_source: str | None = None
    job_id: str | None = None
    job_url: str | None = None
    ref_name: str | None = None
    mr_iid: str | None = None
    mr_target_branch: str | None = None
    default_branch: str | None = None
    repo_url: str | None = (
        None  # what pods `git fetch` from (HTTPS; credentials come from a Secret)
    )

    @property
    def short_sha(self) -> str:
        return self.sha[:8]

    @property
    def in_ci(self) -> bool:
        return self.job_id is not None


# The GitLab predefined variables this object is built from, with the field each one fills.
CI_VARIABLES: Mapping[str, str] = {
    "CI_COMMIT_SHA": "sha",
    "CI_PROJECT_PATH": "project_path",
    "CI_PROJECT_ID": "project_id",
    "CI_PROJECT_URL": "project_url",
    "CI_SERVER_URL": "server_url",
    "CI_PIPELINE_ID": "pipeline_id",
    "CI_PIPELINE_SOURCE": "pipeline_source",
    "CI_JOB_ID": "job_id",
    "CI_JOB_URL": "job_url",
    "CI_COMMIT_REF_NAME": "ref_name",
    "CI_MERGE_REQUEST_IID": "mr_iid",
    "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "mr_target_branch",
    "CI_DEFAULT_BRANCH": "default_branch",
}
