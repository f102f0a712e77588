"""The baseline's bytes: the target branch's ``metrics.json`` from the newest successful pipeline
that has it.

GitLab's ``jobs/artifacts/:ref/raw/*path`` reads only the latest successful pipeline of the ref
(``Project#latest_successful_build_for_ref``, lib/api/ci/job_artifacts.rb in gitlabhq/gitlabhq):
a scheduled or docs-only pipeline without the train job hides every older result. So the
successful pipelines of the branch are walked back, newest first, up to a bound, and the first
whose ``ci_job_name`` job succeeded with artifacts holding ``path`` gives the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import gitlab
from gitlab.v4.objects import Project

from ci_runner.gitlab.client import gitlab_errors

MAX_PIPELINES: Final = 10  # successful pipelines of the target branch looked at, newest first


@dataclass(frozen=True)
class BaselineFile:
    """The file, and the pipeline it came from."""

    data: bytes
    pipeline_id: int
    pipeline_url: str | None


def fetch_baseline(
    project: Project,
    ref: str,
    ci_job_name: str,
    path: str = "metrics.json",
    *,
    max_pipelines: int = MAX_PIPELINES,
) -> BaselineFile | None:
    """``path`` from the artifacts of job ``ci_job_name`` in the newest of the last
    ``max_pipelines`` successful pipelines of branch ``ref`` that has it; None when none has
    (no green pipeline, no such job, expired artifacts). Any other failure raises
    :class:`GitLabError`."""
    where = project.path_with_namespace
    action = f"download the baseline {path} of job {ci_job_name} on {ref} in {where}"
    with gitlab_errors(action, project.manager.gitlab.url):
        pipelines = project.pipelines.list(
            ref=ref,
            status="success",
            order_by="id",
            sort="desc",
            per_page=max_pipelines,
            get_all=False,
        )
        for pipeline in pipelines[:max_pipelines]:
            jobs = pipeline.manager.gitlab.http_list(
                f"/projects/{project.id}/pipelines/{pipeline.id}/jobs",
                query_data={"scope[]": "success", "per_page": 100},
                iterator=True,
            )
            for job in jobs:
                if job.get("name") != ci_job_name or not job.get("artifacts"):
                    continue
                data = _job_file(project, int(job["id"]), path)
                if data is not None:
                    return BaselineFile(data, int(pipeline.id), pipeline.attributes.get("web_url"))
    return None


def _job_file(project: Project, job_id: int, path: str) -> bytes | None:
    try:
        data = project.jobs.get(job_id, lazy=True).artifact(quote(path, safe="/"))
    except gitlab.GitlabGetError as error:
        if error.response_code == 404:  # not in this job's archive, or expired
            return None
        raise
    return bytes(data) if data is not None else None
