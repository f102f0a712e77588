"""Job-artifact files: ``/projects/:id/jobs/artifacts/:ref/raw/*path?job=`` and
``/projects/:id/jobs/:job_id/artifacts/*path``.

By ref, GitLab reads only the latest successful pipeline for the ref: if that pipeline has no
such job with artifacts, 404 even when older pipelines have one (app/models/project.rb
``latest_successful_build_for_ref``; lib/api/ci/job_artifacts.rb).
"""

from __future__ import annotations

from collections.abc import Mapping

from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.model import Job, Project, latest_successful
from testing.fake_gitlab.responses import Reply, Response, only


def _by_ref(rest: list[str]) -> bool:
    return rest[:2] == ["jobs", "artifacts"] and "raw" in rest[3:]


def _by_job(rest: list[str]) -> bool:
    return rest[0] == "jobs" and len(rest) >= 4 and rest[2] == "artifacts"


def _serve(call: Call, project: Project, rest: list[str]) -> Response:
    if _by_ref(rest):
        cut = rest.index("raw", 3)
        ref, artifact = "/".join(rest[2:cut]), "/".join(rest[cut + 1 :])
        return only(call.method, "GET", lambda: _of_ref(project, ref, artifact, call.query))
    job = _find_job(project, rest[1])
    artifact = "/".join(rest[3:])
    return only(call.method, "GET", lambda: _artifact_file(job, artifact))


AREA = ProjectArea(matches=lambda rest: _by_ref(rest) or _by_job(rest), serve=_serve)


def _of_ref(project: Project, ref: str, path: str, query: Mapping[str, str]) -> Response:
    job_name = query.get("job")
    if not job_name:
        raise Reply(400, {"error": "job is missing"})
    # Project#latest_successful_build_for_ref: the latest successful pipeline only.
    pipeline = latest_successful(project, ref)
    job = None
    if pipeline is not None:
        job = next((j for j in pipeline.jobs if j.name == job_name and j.artifacts), None)
    if job is None:
        raise Reply(404, {"message": "404 Not Found"})
    return _artifact_file(job, path)


def _find_job(project: Project, job_id: str) -> Job:
    for pipeline in project.pipelines:
        for job in pipeline.jobs:
            if str(job.id) == job_id:
                return job
    raise Reply(404, {"message": "404 Not found"})


def _artifact_file(job: Job, path: str) -> Response:
    data = job.artifacts.get(path)
    if data is None:
        raise Reply(404, {"message": "404 Not Found"})
    return Response(200, data, "application/octet-stream")
