"""Admission on the fake API server: ResourceQuota, injected denials, and the pod log's container.

Quotas are checked as the ResourceQuota admission plugin checks a pod create (requests of the pods
already in the namespace plus the new one against ``hard``); denials stand for PodSecurity or a
validating webhook. Both answer 403 with the API server's text. :func:`log_container` resolves
``container=`` for ``pods/{name}/log`` the way the pod registry does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from testing.fake_kube import crd
from testing.fake_kube.store import ApiError

JSON = dict[str, Any]
SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}
QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("4Gi", "500m", 2) as a number of base units."""
    match = QUANTITY.match(str(value))
    if match is None or match[2] not in ("", *SUFFIXES):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    return Fraction(match[1]) * SUFFIXES.get(match[2], 1)


def format_quantity(amount: Fraction, like: str) -> str:
    """``amount`` in the unit family of resource ``like`` (memory in Gi/Mi, cpu in m)."""
    if amount.denominator == 1:
        whole = int(amount)
        if "memory" in like or "storage" in like:
            for suffix in ("Gi", "Mi", "Ki"):
                unit = SUFFIXES[suffix]
                if whole and whole % unit == 0:
                    return f"{whole // unit}{suffix}"
        return str(whole)
    return f"{int(amount * 1000)}m"


def pod_requests(pod: JSON) -> dict[str, Fraction]:
    """Summed container requests; a limit without a request counts as the request
    (pkg/apis/core/v1/defaults.go SetDefaults_Pod copies limits into empty requests)."""
    total: dict[str, Fraction] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    return total


# pkg/quota/v1/evaluator/core/pods.go validationSet: a quota tracking one of these requires
# every container, init containers included, to declare it.
QUOTA_VALIDATION_SET = (
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
)


def quota_constraints(pod: JSON, hard: dict[str, str]) -> str | None:
    """pkg/quota/v1/evaluator/core/pods.go Constraints (and enforcePodContainerConstraints,
    podComputeUsageHelper): ``must specify R for: c1,c2; ...`` naming, resource by resource in
    sorted order, the containers that leave out what the quota tracks; None when none does.
    Requests left empty are the limits (pkg/apis/core/v1/defaults.go SetDefaults_Pod runs
    before admission)."""
    required = set(hard) & set(QUOTA_VALIDATION_SET)
    spec = pod.get("spec", {})
    missing: dict[str, set[str]] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        declared = set()
        for name in ("cpu", "memory"):
            if name in requests:
                declared |= {name, f"requests.{name}"}
            if name in limits:
                declared.add(f"limits.{name}")
        for name in required - declared:
            missing.setdefault(name, set()).add(container["name"])
    if not missing:
        return None
    return "must specify " + "; ".join(
        f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)
    )


@dataclass
class Quota:
    """A ResourceQuota: ``hard`` like {"requests.nvidia.com/gpu": "2", "pods": "10"}."""

    name: str
    namespace: str
    hard: dict[str, str]

    def usage(self, pod: JSON) -> dict[str, Fraction]:
        """What one pod counts against this quota (pkg/quota/v1/evaluator/core/pods.go)."""
        requests = pod_requests(pod)
        used: dict[str, Fraction] = {"pods": Fraction(1)}
        for name, amount in requests.items():
            used[f"requests.{name}"] = amount
            used[f"limits.{name}"] = amount
            if name in ("cpu", "memory"):
                used[name] = amount
        return {k: v for k, v in used.items() if k in self.hard}


@dataclass
class Denial:
    """An admission plugin or webhook refusing matching requests ``times`` times (-1: always)."""

    resource: str
    message: Callable[[JSON], str]
    times: int = -1
    applies: Callable[[JSON], bool] = field(default=lambda obj: True)


def quota_message(quota: Quota, requested: dict[str, Fraction], used: dict[str, Fraction]) -> str:
    """plugin/pkg/admission/resourcequota/controller.go CheckRequest: the resources over the
    limit, sorted, as ``exceeded quota: NAME, requested: r=q, used: r=q, limited: r=q``."""
    over = sorted(
        name
        for name, amount in requested.items()
        if used.get(name, Fraction(0)) + amount > quantity(quota.hard[name])
    )

    def listed(values: dict[str, Fraction]) -> str:
        return ",".join(f"{n}={format_quantity(values.get(n, Fraction(0)), n)}" for n in over)

    limits = {n: quantity(quota.hard[n]) for n in over}
    return (
        f"exceeded quota: {quota.name}, requested: {listed(requested)}, "
        f"used: {listed(used)}, limited: {listed(limits)}"
    )


class Admission:
    """The validating admission chain for creates: quotas first, then injected denials."""

    def __init__(self) -> None:
        self.quotas: list[Quota] = []
        self.denials: list[Denial] = []

    def check(self, key: str, namespace: str, obj: JSON, pods: list[JSON]) -> None:
        """Raise the 403 the API server answers, or return when the create is admitted."""
        name = obj.get("metadata", {}).get("name", "")
        if key == "pods":
            for quota in (q for q in self.quotas if q.namespace == namespace):
                unmet = quota_constraints(obj, quota.hard)
                if unmet is not None:
                    # plugin/resourcequota/controller.go checkQuotas wraps Constraints' error.
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'pods "{name}" is forbidden: failed quota: {quota.name}: {unmet}',
                    )
                requested = quota.usage(obj)
                used: dict[str, Fraction] = {}
                for pod in pods:
                    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                        continue  # pods.go: terminal pods no longer count
                    for res, amount in quota.usage(pod).items():
                        used[res] = used.get(res, Fraction(0)) + amount
                if any(
                    used.get(res, Fraction(0)) + amount > quantity(quota.hard[res])
                    for res, amount in requested.items()
                ):
                    # apiserver/pkg/admission/errors.go NewForbidden wraps the plugin's error.
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'pods "{name}" is forbidden: {quota_message(quota, requested, used)}',
                    )
        for denial in self.denials:
            if denial.resource == key and denial.times != 0 and denial.applies(obj):
                denial.times -= 1 if denial.times > 0 else 0
                raise ApiError(403, "Forbidden", denial.message(obj))


def pod_security_denial(violations: str, level: str = "restricted:latest") -> Callable[[JSON], str]:
    """staging/src/k8s.io/pod-security-admission/admission/admission.go: the message of a pod
    refused by the PodSecurity admission plugin in enforce mode."""
    return lambda pod: (
        f'pods "{pod["metadata"]["name"]}" is forbidden: violates PodSecurity "{level}": '
        f"{violations}"
    )


def webhook_denial(webhook: str, reason: str) -> Callable[[JSON], str]:
    """apiserver/pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr."""
    return lambda obj: f'admission webhook "{webhook}" denied the request: {reason}'


def log_container(pod: JSON, container: str | None) -> str:
    """pkg/registry/core/pod/strategy.go validateContainer: the container a log request reads."""
    spec = pod.get("spec", {})
    names = [c["name"] for c in spec.get("containers") or []]
    init = [c["name"] for c in spec.get("initContainers") or []]
    ephemeral = [c["name"] for c in spec.get("ephemeralContainers") or []]
    podname = pod["metadata"]["name"]
    if not container:
        if len(names) == 1:
            return names[0]
        message = (
            f"a container name must be specified for pod {podname}, "
            f"choose one of: [{' '.join(names)}]"
        )
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        if ephemeral:
            message += f" or one of the ephemeral containers: [{' '.join(ephemeral)}]"
        raise ApiError(400, "BadRequest", message)
    if container not in (*names, *init, *ephemeral):
        raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {podname}")
    return container


def validate_create(manifest: JSON) -> None:
    """422 for what the API server checks (the CRD schema, object rules); the MPI Operator's own
    checks become a ValidationError Event later (fake_kube/control_plane/mpi_operator.py)."""
    controller = set(crd._controller_rules(manifest))
    errors = [e for e in crd.validate_mpijob(manifest) if e not in controller]
    if errors:
        name = manifest.get("metadata", {}).get("name", "")
        listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(422, "Invalid", f'MPIJob.kubeflow.org "{name}" is invalid: {listed}')
