"""train.yaml's ``tracking``: where the run is logged as an MLflow run, and what it holds.

``tracking: gitlab`` (a word) is short for ``tracking: {server: gitlab}``. Without the field a
run is tracked when ``MLFLOW_TRACKING_URI`` is set (``server: mlflow``); ``server: off`` never
tracks. The names follow what both MLflow and GitLab's model experiments accept: GitLab keeps
a model's runs in an experiment named ``[model]<name>`` (app/models/ml/model.rb,
``prefixed_experiment``) and model names are package names (lib/gitlab/regex.rb,
``ml_model_name_regex``).
"""

from __future__ import annotations

import re
from typing import Final, TypedDict, cast

from ci_runner.config.engine import (
    INVALID,
    At,
    Build,
    Field,
    Invalid,
    Kind,
    Record,
    T_co,
    Values,
    check,
)
from ci_runner.config.names import Wrong
from ci_runner.config.scalars import OneOf, Str
from ci_runner.config.types import TrackingServer, TrackingSpec
from ci_runner.config.yamlsource import YMapping, YNode, YScalar, shorten

MAX_EXPERIMENT_CHARS: Final = 250  # GitLab's and MLflow's key limits are 250; names fit within
MAX_MODEL_CHARS: Final = 255  # app/models/ml/model.rb: name length maximum 255
_MODEL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def experiment_name(value: str) -> Wrong | None:
    """An experiment's name: one line, at most :data:`MAX_EXPERIMENT_CHARS` characters."""
    if len(value) > MAX_EXPERIMENT_CHARS:
        return (
            f"must be at most {MAX_EXPERIMENT_CHARS} characters, got {len(value)}",
            "shorten it",
        )
    if _CONTROL.search(value) or value.startswith("[model]"):
        return (
            f"must be one line and not start with [model] (GitLab keeps models' runs there), "
            f"got {shorten(value)}",
            "write e.g. experiment: simple-ml",
        )
    return None


def model_name(value: str) -> Wrong | None:
    """A registered model's name: letters, digits, '.', '_' and '-', starting with a letter or
    digit (a name GitLab's model registry and MLflow's both take)."""
    if len(value) <= MAX_MODEL_CHARS and _MODEL_NAME.fullmatch(value):
        return None
    return (
        f"must be at most {MAX_MODEL_CHARS} letters, digits, '.', '_' and '-', starting with a "
        f"letter or digit, got {shorten(value)}",
        "write e.g. model: diabetes-regressor",
    )


class Flag(Kind[bool]):
    """``true`` or ``false``."""

    doc = "boolean"

    def check(self, node: YNode, at: At) -> bool | Invalid:
        if isinstance(node, YScalar) and isinstance(node.value, bool):
            return node.value
        return at.wrong_type(node, "true or false")


class WordOrRecord(Record[Values, T_co]):
    """A :class:`Record` that also takes a word alone, as the value of its first field."""

    def __init__(self, *fields: Field, build: Build[Values, T_co]) -> None:
        super().__init__(*fields, build=build, doc="word or mapping")

    def check(self, node: YNode, at: At) -> T_co | Invalid:
        if isinstance(node, YMapping):
            return super().check(node, at)
        first = self.fields[0]
        value = check(first.kind, node, at)
        if isinstance(value, Invalid):
            return INVALID
        return self.build(cast(Values, {first.key: value}), at, True, frozenset({first.key}))


class TrackingValues(TypedDict, total=False):
    server: TrackingServer
    experiment: str
    per_rank: bool
    model: str
    ranks_log: bool


def build_tracking(
    values: TrackingValues, at: At, ok: bool, keys: frozenset[str]
) -> TrackingSpec | Invalid:
    """A model may share the experiment's name: GitLab keeps the model's own runs in the
    experiment ``[model]<name>`` (app/models/ml/model.rb ``prefixed_experiment``)."""
    line = at.line_of("ranks_log") if values.get("ranks_log") else None
    return TrackingSpec(**values, ranks_log_line=line) if ok else INVALID


TRACKING: Final = WordOrRecord(
    Field(
        "server",
        OneOf[TrackingServer]("mlflow", "gitlab", "off"),
        "`mlflow`: the server MLFLOW_TRACKING_URI names, when it is set; `gitlab`: this "
        "project's model experiments (CI_RUNNER_GITLAB_TOKEN); `off`: never. A word alone is "
        "this field: `tracking: gitlab`.",
        "gitlab",
        "`mlflow`",
    ),
    Field(
        "experiment",
        Str(rule=experiment_name),
        f"The MLflow experiment (at most {MAX_EXPERIMENT_CHARS} characters).",
        "diabetes",
        "`name`",
    ),
    Field(
        "per_rank",
        Flag(),
        "Also log each rank's values, as `<metric>/rank_<n>` (the mean over ranks is `<metric>`).",
        "true",
        "`false`",
    ),
    Field(
        "model",
        Str(rule=model_name),
        "On the default branch, after a successful run, register a new version of this model "
        "whose description and `ci_runner.outputs` tag name the outputs (an MLflow server also "
        "records them as its source, with the run; GitLab ignores both and numbers versions "
        "1.0.0, 1.0.1, ...).",
        "diabetes-regressor",
    ),
    Field(
        "ranks_log",
        Flag(),
        "The training code logs to the run itself (`mlflow.log_*`): every rank gets "
        "MLFLOW_TRACKING_URI, MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_ID and a token of its own, "
        "CI_RUNNER_MLFLOW_TOKEN as MLFLOW_TRACKING_TOKEN (for `server: mlflow` also MLflow's own "
        "token or password), never CI_RUNNER_GITLAB_TOKEN. Without it the ranks get no MLflow "
        "variable and no token; ci-runner logs the run from the log.",
        "true",
        "`false`",
    ),
    build=build_tracking,
)
