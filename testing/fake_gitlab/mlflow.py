"""The MLflow routes GitLab serves under ``/api/v4/projects/:id/ml/mlflow/api/2.0/mlflow/``, for
the fake GitLab (server.py hands them every request below ``ml/mlflow``).

Only what ci-runner calls, answered as GitLab answers (gitlabhq/gitlabhq, files as cited):

- Every answer is 200, never 201 (lib/api/ml/mlflow/entrypoint.rb, ``status 200``); tokens with
  ``api`` may write, ``read_api`` only GET (entrypoint.rb ``allow_access_with_scope``; checked
  by server.py's authentication, which also takes ``Authorization: Bearer``).
- Reading needs at least the Guest role, else 404 ``404 Not Found``; writing needs the
  Developer role, else 401 ``401 Unauthorized`` (api_helpers.rb ``check_api_read!`` /
  ``check_api_write!``; app/policies/project_policy.rb ``read_model_experiments`` for guests,
  ``write_model_experiments`` for developers; the model registry alike).
- Missing things are 404 ``{"error_code": "RESOURCE_DOES_NOT_EXIST"}``, an experiment or model
  that exists 400 ``RESOURCE_ALREADY_EXISTS``, a value the database refuses 400
  ``INVALID_PARAMETER_VALUE`` (api_helpers.rb; entrypoint.rb rescues ActiveRecordError).
  Missing required params get Grape's 400 ``{"error": "<name> is missing"}``.
- Experiments: ids are the project's iids as strings (entities/ml/mlflow/experiment.rb).
- Runs (runs.rb): ``runs/create`` names the run ``run_name`` or the ``mlflow.runName`` tag
  (candidate_repository.rb ``candidate_name``); a ``gitlab.CI_JOB_ID`` tag must name an
  existing job, else the run is kept but the request fails with 500
  (handle_candidate_gitlab_metadata_service.rb raises ArgumentError after the candidate is
  saved). ``runs/update`` takes RUNNING, SCHEDULED, FINISHED, FAILED, KILLED (ml/candidate.rb
  ``statuses``). ``runs/log-batch`` inserts without model validations (``insert_all``), so
  only the columns' limits apply: param names and values 250 characters, metric names 250, tag
  names 255 and values 5000 (db/migrate create_ml_candidate_params, _metrics, _metadata).
  ``runs/log-parameter`` (what ``mlflow.log_param`` sends) creates one param with
  ``params.create!`` (candidate_repository.rb ``add_param!``), so the model validates it
  (app/models/ml/candidate_param.rb: name unique per run, name and value present and at most
  250 characters): a failure is ActiveRecord's error, 400 ``INVALID_PARAMETER_VALUE``.
- Registered models and model versions (registered_models.rb, model_versions.rb): a version
  is a semantic version, 1.0.0 for the first, else the latest's patch plus one, or the
  ``gitlab.version`` tag (create_model_version_service.rb, increment_version_service.rb);
  ``source`` and ``run_id`` are ignored (the docs' caveats).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSONValue = Any
Answer = tuple[int, JSONValue]
PREFIX = ["api", "2.0", "mlflow"]
STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
)
LIMITS = {"param_name": 250, "param_value": 250, "metric_name": 250, "tag_name": 255,
          "tag_value": 5000, "run_name": 255}  # fmt: skip
ROLES = ("none", "guest", "reporter", "developer", "maintainer", "owner")  # "none": no member
NOT_FOUND: Answer = (404, {"error_code": "RESOURCE_DOES_NOT_EXIST"})


@dataclass
class Metric:
    key: str
    value: float
    timestamp: int
    step: int | None


@dataclass
class Run:
    run_id: str
    experiment_id: str
    name: str | None
    start_time: int
    user_id: int
    status: str = "RUNNING"
    end_time: int | None = None
    ci_job_id: str | None = None
    metrics: list[Metric] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Experiment:
    iid: int
    name: str
    runs: list[Run] = field(default_factory=list)


@dataclass
class Model:
    name: str
    description: str
    versions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ProjectMlflow:
    experiments: list[Experiment] = field(default_factory=list)
    models: list[Model] = field(default_factory=list)
    roles: dict[int, str] = field(default_factory=dict)  # user id -> role; default developer

    def experiment(self, name: str) -> Experiment | None:
        return next((e for e in self.experiments if e.name == name), None)


class _Stop(Exception):
    def __init__(self, answer: Answer) -> None:
        super().__init__(answer[0])
        self.answer = answer


class FakeMlflow:
    """The state of every project's model experiments and registry."""

    def __init__(self, job_exists: Callable[[str], bool], base_url: Callable[[], str]) -> None:
        self._projects: dict[int, ProjectMlflow] = {}
        self._job_exists = job_exists
        self._base_url = base_url
        self._version_ids = 0

    def of(self, project_id: int) -> ProjectMlflow:
        """One project's experiments, runs and models (tests read and set them)."""
        return self._projects.setdefault(project_id, ProjectMlflow())

    def set_role(self, project_id: int, user_id: int, role: str) -> None:
        self.of(project_id).roles[user_id] = role

    def route(
        self, method: str, project_id: int, user_id: int, rest: list[str],
        query: Mapping[str, str], body: bytes,
    ) -> Answer:  # fmt: skip
        """The answer to ``method`` on ``rest`` (the path below ``ml/mlflow``)."""
        if rest[:3] != PREFIX or len(rest) != 5:
            return 404, {"error": "404 Not Found"}
        resource, action = rest[3], rest[4]
        state = self.of(project_id)
        role = ROLES.index(state.roles.get(user_id, "developer"))
        if role < ROLES.index("guest"):
            return 404, {"message": "404 Not Found"}
        writes = method not in ("GET", "HEAD")
        if writes and role < ROLES.index("developer"):
            return 401, {"message": "401 Unauthorized"}
        try:
            data = _body(body, query, method)
            handler = self._handlers().get((method, resource, action))
            if handler is None:
                return 404, {"error": "404 Not Found"}
            return 200, handler(state, user_id, data)
        except _Stop as stop:
            return stop.answer

    def _handlers(self) -> dict[tuple[str, str, str], Callable[..., JSONValue]]:
        return {
            ("GET", "experiments", "get-by-name"): self._get_experiment,
            ("POST", "experiments", "create"): self._create_experiment,
            ("POST", "runs", "create"): self._create_run,
            ("GET", "runs", "get"): self._get_run,
            ("POST", "runs", "update"): self._update_run,
            ("POST", "runs", "log-batch"): self._log_batch,
            ("POST", "runs", "log-parameter"): self._log_param,
            ("GET", "registered-models", "get"): self._get_model,
            ("POST", "registered-models", "create"): self._create_model,
            ("POST", "model-versions", "create"): self._create_version,
        }

    # --- experiments ------------------------------------------------------------------------

    def _get_experiment(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        found = state.experiment(str(data.get("experiment_name") or ""))
        if found is None:
            raise _Stop(NOT_FOUND)
        return {"experiment": _experiment_json(found)}

    def _create_experiment(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        name = _required(data, "name")
        if state.experiment(name) is not None:
            raise _Stop((400, {"error_code": "RESOURCE_ALREADY_EXISTS"}))
        experiment = Experiment(len(state.experiments) + 1, name)
        state.experiments.append(experiment)
        return {"experiment_id": str(experiment.iid)}

    # --- runs -------------------------------------------------------------------------------

    def _create_run(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        raw = _required(data, "experiment_id")
        if not str(raw).isdigit():
            raise _Stop((400, {"error": "experiment_id is invalid"}))
        experiment = next((e for e in state.experiments if e.iid == int(raw)), None)
        if experiment is None:
            raise _Stop(NOT_FOUND)
        tags = _pairs(data.get("tags"), "tags")
        name = data.get("run_name") or tags.get("mlflow.runName")
        if name is not None and len(str(name)) > LIMITS["run_name"]:
            _invalid("value too long for ml_candidates.name")
        _check_tags(tags)
        run = Run(str(uuid.uuid4()).replace("-", ""), str(experiment.iid), name,
                  int(data.get("start_time") or 0), user_id)  # fmt: skip
        experiment.runs.append(run)
        run.tags.update(tags)
        self._link_job(run, tags)
        return {"run": self._run_json(run)}

    def _link_job(self, run: Run, tags: Mapping[str, str]) -> None:
        job = tags.get("gitlab.CI_JOB_ID")
        if job is None:
            return
        if not self._job_exists(job):
            raise _Stop((500, {"message": "500 Internal Server Error"}))
        run.ci_job_id = job

    def _get_run(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        return {"run": self._run_json(self._run(state, data))}

    def _update_run(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        run = self._run(state, data)
        status = data.get("status")
        if status is not None and status not in STATUSES:
            raise _Stop((400, {"error": "status does not have a valid value"}))
        if status is not None:
            run.status = status
        if data.get("end_time") is not None:
            run.end_time = int(data["end_time"])
        return {"run_info": self._run_json(run)["info"]}

    def _log_batch(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        run = self._run(state, data)
        metrics = []
        for item in data.get("metrics") or []:
            for name in ("key", "value", "timestamp"):
                if not isinstance(item, dict) or item.get(name) is None:
                    raise _Stop((400, {"error": f"metrics[{name}] is missing"}))
            if len(str(item["key"])) > LIMITS["metric_name"]:
                _invalid("value too long for ml_candidate_metrics.name")
            step = None if item.get("step") is None else int(item["step"])
            metric = Metric(str(item["key"]), float(item["value"]), int(item["timestamp"]), step)
            metrics.append(metric)
        params = _pairs(data.get("params"), "params")
        for key, value in params.items():
            if len(key) > LIMITS["param_name"] or len(value) > LIMITS["param_value"]:
                _invalid("value too long for ml_candidate_params")
        tags = _pairs(data.get("tags"), "tags")
        _check_tags(tags)
        run.metrics += metrics
        run.params.update(params)
        run.tags.update(tags)
        self._link_job(run, tags)
        return {}

    def _log_param(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        run = self._run(state, data)
        key, value = _required(data, "key"), _required(data, "value")
        if key in run.params:
            _invalid("Validation failed: Name has already been taken")
        for what, text in (("Name", key), ("Value", value)):
            if len(text) > LIMITS["param_value"]:  # 250 for both (candidate_param.rb)
                _invalid(f"Validation failed: {what} is too long (maximum is 250 characters)")
        run.params[key] = value
        return {}

    def _run(self, state: ProjectMlflow, data: JSONValue) -> Run:
        run_id = _required(data, "run_id")
        for experiment in state.experiments:
            for run in experiment.runs:
                if run.run_id == run_id:
                    return run
        raise _Stop(NOT_FOUND)

    def _run_json(self, run: Run) -> JSONValue:
        info: dict[str, JSONValue] = {
            "run_id": run.run_id,
            "run_uuid": run.run_id,
            "experiment_id": run.experiment_id,
            "start_time": run.start_time,
            "status": run.status,
            "artifact_uri": f"{self._base_url()}/api/v4/projects/packages/ml_models/files/",
            "lifecycle_stage": "active",
            "user_id": str(run.user_id),
        }
        if run.end_time is not None:
            info["end_time"] = run.end_time
        if run.name is not None:
            info["run_name"] = run.name
        latest: dict[str, Metric] = {}
        for metric in run.metrics:
            latest[metric.key] = metric
        return {
            "info": info,
            "data": {
                "metrics": [_metric_json(m) for m in latest.values()],
                "params": [{"key": k, "value": v} for k, v in run.params.items()],
                "tags": [{"key": k, "value": v} for k, v in run.tags.items()],
            },
        }

    # --- the model registry -----------------------------------------------------------------

    def _get_model(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        model = next((m for m in state.models if m.name == data.get("name")), None)
        if model is None:
            raise _Stop(NOT_FOUND)
        return {"registered_model": _model_json(model)}

    def _create_model(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        name = _required(data, "name")
        taken = state.experiment(f"[model]{name}") is not None
        if taken or any(m.name == name for m in state.models):
            raise _Stop((400, {"error_code": "RESOURCE_ALREADY_EXISTS"}))
        model = Model(name, str(data.get("description") or ""))
        state.models.append(model)
        state.experiments.append(Experiment(len(state.experiments) + 1, f"[model]{name}"))
        return {"registered_model": _model_json(model)}

    def _create_version(self, state: ProjectMlflow, user_id: int, data: JSONValue) -> JSONValue:
        model = next((m for m in state.models if m.name == data.get("name")), None)
        if model is None:
            raise _Stop(NOT_FOUND)
        tags = _pairs(data.get("tags"), "tags")
        version = tags.get("gitlab.version") or _next_version(model)
        if not SEMVER.fullmatch(version):
            _invalid("Version must be semantic version")
        if any(v["version"] == version for v in model.versions):
            _invalid("Validation failed: Version has already been taken")
        self._version_ids += 1
        entry = {"id": self._version_ids, "version": version, "tags": tags,
                 "description": str(data.get("description") or "")}  # fmt: skip
        model.versions.append(entry)
        return {"model_version": _version_json(model, entry)}


def _next_version(model: Model) -> str:
    """Ml::IncrementVersionService on the latest semantic version: 1.0.0, else its patch + 1."""
    if not model.versions:
        return "1.0.0"
    parts = [tuple(int(p) for p in v["version"].split("-")[0].split(".")) for v in model.versions]
    major, minor, patch = max(parts)
    return f"{major}.{minor}.{patch + 1}"


def _body(body: bytes, query: Mapping[str, str], method: str) -> JSONValue:
    if method == "GET":
        return dict(query)
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        raise _Stop((400, {"error": "The provided content-type is not supported"})) from None
    if not isinstance(data, dict):
        raise _Stop((400, {"error": "The provided content-type is not supported"}))
    return data


def _required(data: JSONValue, name: str) -> str:
    value = data.get(name)
    if value is None or value == "":
        raise _Stop((400, {"error": f"{name} is missing"}))
    return str(value)


def _pairs(items: object, what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("key") is None or item.get("value") is None:
            raise _Stop((400, {"error": f"{what}[key], {what}[value] are missing"}))
        found[str(item["key"])] = str(item["value"])
    return found


def _check_tags(tags: Mapping[str, str]) -> None:
    for key, value in tags.items():
        if len(key) > LIMITS["tag_name"] or len(value) > LIMITS["tag_value"]:
            _invalid("value too long for ml_candidate_metadata")


def _invalid(message: str) -> None:
    raise _Stop((400, {"error_code": "INVALID_PARAMETER_VALUE", "message": message}))


def _experiment_json(experiment: Experiment) -> JSONValue:
    return {
        "experiment_id": str(experiment.iid),
        "name": experiment.name,
        "lifecycle_stage": "active",
        "artifact_location": "not_implemented",
        "tags": [],
    }


def _metric_json(metric: Metric) -> JSONValue:
    data: dict[str, JSONValue] = {"key": metric.key, "value": metric.value,
                                  "timestamp": metric.timestamp}  # fmt: skip
    if metric.step is not None:
        data["step"] = metric.step
    return data


def _model_json(model: Model) -> JSONValue:
    return {"name": model.name, "description": model.description, "tags": [],
            "latest_versions": [v["version"] for v in model.versions]}  # fmt: skip


def _version_json(model: Model, entry: Mapping[str, Any]) -> JSONValue:
    return {
        "name": model.name,
        "version": str(entry["id"]),  # the record's id (entities/ml/mlflow/model_version.rb)
        "description": entry["description"],
        "current_stage": "development",
        "status": "READY",
        "run_link": "",
        "tags": [{"key": k, "value": v} for k, v in entry["tags"].items()],
        "aliases": [entry["version"]],
    }
