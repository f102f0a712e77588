"""Admission on the fake API server: injected denials (a validating webhook's 403, with the API
server's text) and the MPIJob create's 422 (the CRD schema and the object rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testing.fake_kube import crd
from testing.fake_kube.store import ApiError

JSON = dict[str, Any]


@dataclass
class Denial:
    """An admission plugin or webhook refusing matching requests ``times`` times (-1: always)."""

    resource: str
    message: Callable[[JSON], str]
    times: int = -1
    applies: Callable[[JSON], bool] = field(default=lambda obj: True)


class Admission:
    """The validating admission chain for creates: injected denials."""

    def __init__(self) -> None:
        self.denials: list[Denial] = []

    def check(self, key: str, obj: JSON) -> None:
        """Raise the 403 the API server answers, or return when the create is admitted."""
        for denial in self.denials:
            if denial.resource == key and denial.times != 0 and denial.applies(obj):
                denial.times -= 1 if denial.times > 0 else 0
                raise ApiError(403, "Forbidden", denial.message(obj))


def webhook_denial(webhook: str, reason: str) -> Callable[[JSON], str]:
    """apiserver/pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr."""
    return lambda obj: f'admission webhook "{webhook}" denied the request: {reason}'


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _json_type(value: object) -> str:
    for python, name in _JSON_TYPES:
        if isinstance(value, python):
            return name
    return "array" if isinstance(value, list) else "object" if value is not None else "null"


def _schema_error(error: Any) -> str | None:
    """kube-apiserver's text for one CRD-schema violation (None: pruned, not refused).

    Unknown fields are pruned (apiextensions-apiserver/pkg/apiserver/schema/pruning); a wrong
    type is kube-openapi's InvalidType wrapped as field.Invalid of the value's JSON type
    (apiextensions-apiserver/pkg/apiserver/validation/validation.go, kube-openapi
    pkg/validation/errors/schema.go: ``%s in body must be of type %s: %q``). The fake knows no
    other text, and says so rather than invent one."""
    if error.validator == "additionalProperties":
        return None
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "type":
        expected = error.validator_value
        if isinstance(expected, list):
            expected = next(t for t in expected if t != "null")
        actual = _json_type(error.instance)
        return (
            f'{path}: Invalid value: "{actual}": {path} in body must be of type {expected}: '
            f'"{actual}"'
        )
    raise NotImplementedError(f"the fake API server has no kube-apiserver text for: {error}")


def validate_create(manifest: JSON) -> None:
    """422 for what kube-apiserver checks of an MPIJob (the CRD schema), in its words
    (staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go NewInvalid: one error, or a
    bracketed list); the MPI Operator's own checks become a ValidationError Event later (the
    operator's, not the API server's)."""
    errors = [
        text
        for error in sorted(
            crd.schema_errors(manifest), key=lambda e: [str(p) for p in e.absolute_path]
        )
        if (text := _schema_error(error)) is not None
    ]
    if errors:
        name = manifest.get("metadata", {}).get("name", "")
        listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(422, "Invalid", f'MPIJob.kubeflow.org "{name}" is invalid: {listed}')
