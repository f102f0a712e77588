"""The baseline's bytes: the target branch's ``metrics.json`` from its latest green pipeline."""

from __future__ import annotations

from urllib.parse import quote

import gitlab
from gitlab.v4.objects import Project

from ci_runner.gitlab.client import gitlab_errors


def fetch_baseline(
    project: Project, ref: str, job_name: str, path: str = "metrics.json"
) -> bytes | None:
    """``path`` from the artifacts of job ``job_name`` in the latest successful pipeline of branch
    ``ref``, as raw bytes; None when GitLab has none (404: no green pipeline, no such job, or
    expired artifacts). Any other failure raises :class:`GitLabError`."""
    action = (
        f"download the baseline {path} of job {job_name} on {ref} in {project.path_with_namespace}"
    )
    # python-gitlab puts ref and path into the URL as given: encode what would break it, keep
    # slashes (GitLab routes refs like release/1.0 and nested artifact paths unencoded).
    with gitlab_errors(action, project.manager.gitlab.url):
        try:
            data: bytes = project.artifacts.raw(
                quote(ref, safe="/"), quote(path, safe="/"), job_name
            )
        except gitlab.GitlabGetError as error:
            if error.response_code == 404:
                return None
            raise
    return data
