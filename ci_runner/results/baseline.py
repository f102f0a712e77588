"""The baseline: the final metric values of the target branch, from the ``metrics.json`` of its
newest successful pipeline that has one, for the report to compare with.

GitLab's ``jobs/artifacts/:ref/raw/*path`` reads only the latest successful pipeline of the ref
(``Project#latest_successful_build_for_ref``, lib/api/ci/job_artifacts.rb in gitlabhq/gitlabhq):
a scheduled or docs-only pipeline without the train job hides every older result. So the
successful pipelines of the branch are walked back, newest first, up to a bound, and the first
whose ``ci_job_name`` job succeeded with artifacts holding ``path`` gives the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from ci_runner.console import StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.results.files import METRICS_NAME
from ci_runner.results.metrics_file import MetricsFileError, load_baseline

if TYPE_CHECKING:
    from gitlab.v4.objects import Project

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
    path: str = METRICS_NAME,
    *,
    max_pipelines: int = MAX_PIPELINES,
) -> BaselineFile | None:
    """``path`` from the artifacts of job ``ci_job_name`` in the newest of the last
    ``max_pipelines`` successful pipelines of branch ``ref`` that has it; None when none has
    (no green pipeline, no such job, expired artifacts). Any other failure raises
    :class:`GitLabError`."""
    from ci_runner.gitlab.client import gitlab_errors  # python-gitlab loads on use

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
    import gitlab

    try:
        data = project.jobs.get(job_id, lazy=True).artifact(quote(path, safe="/"))
    except gitlab.GitlabGetError as error:
        if error.response_code == 404:  # not in this job's archive, or expired
            return None
        raise
    return bytes(data) if data is not None else None


@dataclass(frozen=True)
class Baseline:
    """Final value by metric name, and the pipeline (``#id`` and URL) they came from."""

    values: dict[str, float]
    pipeline: tuple[int, str | None]


def load_target_baseline(
    project: Any, ref: str, ci_job_name: str, path: str = METRICS_NAME
) -> Baseline | None:
    """Final value by metric name from the target branch's ``metrics.json`` of the newest
    successful pipeline that has one; None without one.

    Raises :class:`GitLabError` when GitLab fails and ``MetricsFileError`` when the file is not
    one ci-runner wrote.
    """
    found = fetch_baseline(project, ref, ci_job_name, path)
    if found is None:
        return None
    return Baseline(load_baseline(found.data), (found.pipeline_id, found.pipeline_url))


def target_baseline(
    project: Any,
    ctx: CIContext,
    ref: str | None,
    artifacts_path: str,
    console: StatusOutput,
) -> Baseline | None:
    """The baseline of ``ref`` for this CI job (its ``metrics.json`` under ``artifacts_path``),
    or None, with one warning when GitLab or the file fails."""
    if not ref or not ctx.ci_job_name:
        return None
    path = f"{artifacts_path.strip('/')}/{METRICS_NAME}"
    try:
        return load_target_baseline(project, ref, ctx.ci_job_name, path)
    except (GitLabError, MetricsFileError) as error:
        console.warning(f"no baseline from {ref}: {error}")
        return None
