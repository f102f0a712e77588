"""``/projects/:id/pipelines``: lib/api/ci/pipelines.rb: list (ref, status, source filters;
newest id first by default) and a pipeline's jobs (``scope[]`` filter)."""

from __future__ import annotations

from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.model import Job, Pipeline, Project
from testing.fake_gitlab.responses import JSONValue, Reply, Response, no_such_route, only


def _serve(call: Call, project: Project, rest: list[str]) -> Response:
    method, query, page = call.method, call.query, call.page
    if len(rest) == 1:
        found = [
            p
            for p in project.pipelines
            if all(
                not query.get(key) or getattr(p, key) == query[key]
                for key in ("ref", "status", "source", "sha")
            )
        ]
        order_by = query.get("order_by", "id")
        if order_by not in ("id", "status", "ref", "updated_at", "user_id"):
            raise Reply(400, {"error": "order_by does not have a valid value"})
        found.sort(key=lambda p: p.id, reverse=query.get("sort", "desc") == "desc")
        return only(
            method,
            "GET",
            lambda: page.respond([_pipeline_json(project, p, page.base) for p in found]),
        )
    pipeline = next((p for p in project.pipelines if str(p.id) == rest[1]), None)
    if pipeline is None:
        raise Reply(404, {"message": "404 Not found"})
    if len(rest) == 3 and rest[2] == "jobs":
        scopes = set(page.query_list("scope[]"))
        jobs = [j for j in reversed(pipeline.jobs) if not scopes or j.status in scopes]
        return only(
            method,
            "GET",
            lambda: page.respond([_job_json(project, pipeline, j, page.base) for j in jobs]),
        )
    raise no_such_route()


AREA = ProjectArea(matches=lambda rest: rest[0] == "pipelines", serve=_serve)


def _pipeline_json(project: Project, pipeline: Pipeline, base: str) -> JSONValue:
    return {
        "id": pipeline.id,
        "iid": pipeline.id,
        "project_id": project.id,
        "sha": pipeline.sha,
        "ref": pipeline.ref,
        "status": pipeline.status,
        "source": pipeline.source,
        "web_url": f"{base}/{project.path}/-/pipelines/{pipeline.id}",
    }


def _job_json(project: Project, pipeline: Pipeline, job: Job, base: str) -> JSONValue:
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "ref": pipeline.ref,
        "pipeline": _pipeline_json(project, pipeline, base),
        "artifacts": [
            {
                "file_type": "archive",
                "size": sum(len(v) for v in job.artifacts.values()),
                "filename": "artifacts.zip",
                "file_format": "zip",
            }
        ]
        if job.artifacts
        else [],
        "web_url": f"{base}/{project.path}/-/jobs/{job.id}",
    }
