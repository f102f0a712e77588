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


def validate_create(manifest: JSON) -> None:
    """422 for what the API server checks (the CRD schema, object rules); the MPI Operator's own
    checks become a ValidationError Event later (the operator's, not the API server's)."""
    controller = set(crd._controller_rules(manifest))
    errors = [e for e in crd.validate_mpijob(manifest) if e not in controller]
    if errors:
        name = manifest.get("metadata", {}).get("name", "")
        listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(422, "Invalid", f'MPIJob.kubeflow.org "{name}" is invalid: {listed}')
