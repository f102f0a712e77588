"""Validate an MPIJob manifest the way the cluster would: the CRD's schema plus the controller.

``validate_mpijob(manifest)`` returns every problem as a line (empty when the manifest is valid):
the real CRD's ``openAPIV3Schema`` (MPI Operator v0.8.2), made strict, the MPI Operator
controller's own checks (v0.8.2's pkg/apis/kubeflow/validation/validation.go), and the
Kubernetes object rules a manifest most easily breaks (names, labels, env var names, volume
references). Fake Kubernetes servers use it to accept or reject MPIJobs.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from testing.paths import TEST_DATA

CRD_PATH = TEST_DATA / "mpi-operator-v0.8.2" / "kubeflow.org_mpijobs.yaml"

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def validate_mpijob(manifest: Any, crd_path: Path = CRD_PATH) -> list[str]:
    """Every reason the cluster (API server + MPI Operator) would refuse ``manifest``."""
    validator = _validator(str(crd_path))
    errors = [
        f"schema: {_where(error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    ]
    if not isinstance(manifest, Mapping):
        return errors or ["schema: the manifest is not a mapping"]
    return errors + list(_object_rules(manifest)) + list(_controller_rules(manifest))


def schema_errors(manifest: Any, crd_path: Path = CRD_PATH) -> list[Any]:
    """The CRD schema's violations in ``manifest`` (jsonschema errors; unknown fields too)."""
    return list(_validator(str(crd_path)).iter_errors(manifest))


@functools.cache
def _validator(crd_path: str) -> Any:
    crd = yaml.safe_load(Path(crd_path).read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    schema["properties"]["apiVersion"]["enum"] = ["kubeflow.org/v2beta1"]
    schema["properties"]["kind"]["enum"] = ["MPIJob"]
    checker = jsonschema.FormatChecker()
    checker.checks("int32")(lambda v: not _is_int(v) or INT32[0] <= v <= INT32[1])
    checker.checks("int64")(lambda v: not _is_int(v) or INT64[0] <= v <= INT64[1])
    cls = jsonschema.validators.extend(
        jsonschema.Draft4Validator,
        {"x-list-map-keys": _unique_map_keys, "x-list-set": _unique_set},
    )
    return cls(schema, format_checker=checker)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The structural schema as JSON Schema, strict where Kubernetes would silently prune.

    Unknown fields become errors (the API server drops them, which would hide a typo in the
    template); ``x-kubernetes-*`` extensions become checks JSON Schema understands.
    """
    if schema.pop("x-kubernetes-int-or-string", False):
        schema.pop("type", None)
        schema.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    preserve = schema.pop("x-kubernetes-preserve-unknown-fields", False)
    if schema.pop("nullable", False) and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    list_type = schema.pop("x-kubernetes-list-type", None)
    map_keys = schema.pop("x-kubernetes-list-map-keys", None)
    if list_type == "map" and map_keys:
        schema["x-list-map-keys"] = map_keys
    elif list_type == "set":
        schema["x-list-set"] = True
    for key in [k for k in schema if k.startswith("x-kubernetes-")]:
        del schema[key]
    if "properties" in schema:
        for sub in schema["properties"].values():
            _strict(sub)
        if "additionalProperties" not in schema and not preserve:
            schema["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _strict(schema[key])
    for key in ("anyOf", "allOf", "oneOf"):
        for sub in schema.get(key, []):
            _strict(sub)
    return schema


def _unique_map_keys(validator: Any, keys: list[str], instance: Any, schema: Any) -> Iterator[Any]:
    if not isinstance(instance, list):
        return
    seen: set[tuple[Any, ...]] = set()
    for item in instance:
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(
                f"duplicate entry for key {dict(zip(keys, key, strict=True))}"
            )
        seen.add(key)


def _unique_set(validator: Any, _: bool, instance: Any, schema: Any) -> Iterator[Any]:
    if isinstance(instance, list):
        values = [repr(v) for v in instance]
        if len(set(values)) != len(values):
            yield jsonschema.ValidationError(f"duplicate values in set {instance!r}")


def _where(path: Any) -> str:
    return "/".join(str(p) for p in path) or "(root)"


def _object_rules(manifest: Mapping[str, Any]) -> Iterator[str]:
    """The API server's checks on metadata and pod templates that the CRD schema leaves out."""
    metadata = manifest.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not DNS_1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        yield f"metadata.name: {name!r} is not a valid object name"
    namespace = metadata.get("namespace")
    if namespace is not None and not (
        isinstance(namespace, str) and DNS_1123_LABEL.fullmatch(namespace) and len(namespace) <= 63
    ):
        yield f"metadata.namespace: {namespace!r} is not a valid namespace"
    yield from _label_rules("metadata", metadata)
    specs = (manifest.get("spec") or {}).get("mpiReplicaSpecs") or {}
    for role, spec in specs.items():
        template = (spec or {}).get("template") or {}
        where = f"spec.mpiReplicaSpecs.{role}.template"
        yield from _label_rules(f"{where}.metadata", template.get("metadata") or {})
        yield from _pod_rules(f"{where}.spec", template.get("spec") or {})


def _label_rules(where: str, metadata: Mapping[str, Any]) -> Iterator[str]:
    for kind in ("labels", "annotations"):
        entries = metadata.get(kind) or {}
        if not isinstance(entries, Mapping):
            yield f"{where}.{kind}: not a mapping"
            continue
        for key, value in entries.items():
            if not _qualified_name(key):
                yield f"{where}.{kind}: {key!r} is not a valid key"
            if not isinstance(value, str):
                yield f"{where}.{kind}.{key}: {value!r} is not a string"
            elif kind == "labels" and not (LABEL_VALUE.fullmatch(value) and len(value) <= 63):
                yield f"{where}.labels.{key}: {value!r} is not a valid label value"
        if kind == "annotations":
            size = sum(len(str(k)) + len(str(v)) for k, v in entries.items())
            if size > 256 * 1024:
                yield f"{where}.annotations: {size} bytes exceed the 256 KiB limit"


def _qualified_name(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and not (DNS_1123_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253):
        return False
    return bool(LABEL_NAME.fullmatch(name)) and len(name) <= 63


def _pod_rules(where: str, pod: Mapping[str, Any]) -> Iterator[str]:
    volumes = {v.get("name") for v in pod.get("volumes") or []}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    names = [c.get("name") for c in containers]
    for name in names:
        if not (isinstance(name, str) and DNS_1123_LABEL.fullmatch(name) and len(name) <= 63):
            yield f"{where}: container name {name!r} is not a valid DNS-1123 label"
    if len(set(names)) != len(names):
        yield f"{where}: container names are not unique: {names}"
    if not pod.get("containers"):
        yield f"{where}.containers: at least one container is required"
    for container in containers:
        cwhere = f"{where}.containers[{container.get('name')}]"
        if not container.get("image"):
            yield f"{cwhere}.image: required"
        for env in container.get("env") or []:
            env_name = env.get("name")
            if not (isinstance(env_name, str) and ENV_VAR_NAME.fullmatch(env_name)):
                yield f"{cwhere}.env: {env_name!r} is not a valid variable name"
            if "value" in env and "valueFrom" in env:
                yield f"{cwhere}.env.{env_name}: value and valueFrom are exclusive"
        env_names = [e.get("name") for e in container.get("env") or []]
        duplicates = sorted({n for n in env_names if env_names.count(n) > 1})
        if duplicates:
            yield f"{cwhere}.env: duplicate variables {duplicates}"
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                yield f"{cwhere}.volumeMounts: no volume named {mount.get('name')!r}"
    if pod.get("dnsPolicy") == "None" and not (pod.get("dnsConfig") or {}).get("nameservers"):
        yield f"{where}.dnsConfig: dnsPolicy None needs at least one nameserver"


def _controller_rules(manifest: Mapping[str, Any]) -> Iterator[str]:
    """The MPI Operator's own validation, after its defaults (a failure is only an Event)."""
    name = (manifest.get("metadata") or {}).get("name") or ""
    spec = manifest.get("spec") or {}
    run_policy = spec.get("runPolicy") or {}
    policy = run_policy.get("cleanPodPolicy")
    if policy is not None and policy not in ("None", "Running", "All"):
        yield f"spec.runPolicy.cleanPodPolicy: {policy!r} is not None, Running or All"
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        value = run_policy.get(field)
        if isinstance(value, int) and value < 0:
            yield f"spec.runPolicy.{field}: must be non-negative"
    slots = spec.get("slotsPerWorker")
    if isinstance(slots, int) and slots < 0:
        yield "spec.slotsPerWorker: must be non-negative"
    specs = spec.get("mpiReplicaSpecs") or {}
    for role in specs:
        if role not in ("Launcher", "Worker"):
            yield f"spec.mpiReplicaSpecs: unknown replica type {role!r}"
    launcher = specs.get("Launcher")
    if not launcher:
        yield "spec.mpiReplicaSpecs.Launcher: required"
    elif launcher.get("replicas", 1) != 1:
        yield "spec.mpiReplicaSpecs.Launcher.replicas: must be exactly 1"
    worker = specs.get("Worker") or {}
    workers = worker.get("replicas")
    if not isinstance(workers, int) or workers < 1:
        yield "spec.mpiReplicaSpecs.Worker.replicas: must be at least 1"
        workers = 1
    for role, replica in specs.items():
        restart = (replica or {}).get("restartPolicy")
        if restart is not None and restart not in ("Never", "OnFailure"):
            yield (
                f"spec.mpiReplicaSpecs.{role}.restartPolicy: {restart!r} is not Never or OnFailure"
            )
    for derived in (name, f"{name}-worker-{workers - 1}", f"{name}-launcher-xxxxx"):
        if not (DNS_1035_LABEL.fullmatch(derived) and len(derived) <= 63):
            yield f"metadata.name: {derived!r} is not a valid DNS-1035 label"
