"""Pure readings of a pod spec the way the kubelet reads it: hostname and /etc/hosts,
environment variables, ``$(VAR)`` expansion, resource quantities, probe settings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

JSON = dict[str, Any]

_SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$"
)


class ConfigError(Exception):
    """CreateContainerConfigError: the container cannot be created yet (the kubelet retries)."""


def quantity(text: str | int | float) -> Decimal:
    """resource.Quantity: ``512Mi``, ``1G``, ``500m``, ``1e9``."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, suffix = match.groups()
    if "e" in number.lower() and suffix:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    return Decimal(number) * Decimal(_SUFFIXES[suffix])


def memory_limit(container: JSON) -> int | None:
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return (
        None if limit is None else int(quantity(limit).to_integral_value(rounding="ROUND_CEILING"))
    )


def hostname(pod: JSON) -> tuple[str, str]:
    """(hostname, domain) as kubelet GeneratePodHostNameAndDomain: ``spec.hostname`` or the pod
    name cut to 63 characters (trailing '-' and '.' dropped); the domain
    ``<subdomain>.<ns>.svc.<cluster domain>`` when ``spec.subdomain`` is set."""
    spec = pod.get("spec") or {}
    name = spec.get("hostname") or pod["metadata"]["name"]
    if len(name) > 63:
        name = name[:63].rstrip("-.")
    return name, spec.get("subdomain") or ""


def hosts_file(pod: JSON, ip: str, cluster_domain: str) -> str:
    """kubelet_pods.go managedHostsFileContent + hostsEntriesFromHostAliases."""
    name, subdomain = hostname(pod)
    namespace = pod["metadata"].get("namespace") or "default"
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    if subdomain:
        lines.append(f"{ip}\t{name}.{subdomain}.{namespace}.svc.{cluster_domain}\t{name}")
    else:
        lines.append(f"{ip}\t{name}")
    aliases = (pod.get("spec") or {}).get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        for alias in aliases:
            for host in alias.get("hostnames") or []:
                lines.append(f"{alias['ip']}\t{host}")
    return "\n".join(lines) + "\n"


def expand(text: str, env: dict[str, str]) -> str:
    """third_party/forked/golang/expansion: ``$(VAR)`` from env (left as is when unknown),
    ``$$`` is a literal ``$``."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end > 0:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: JSON, path: str) -> str:
    """fieldRef values allowed in env (pkg/fieldpath, kubelet podFieldSelectorRuntimeValue)."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.hostIP": status.get("hostIP"),
        "status.hostIPs": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": status.get("podIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD.match(path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    raise ConfigError(f"unsupported fieldPath: {path}")


@dataclass(frozen=True)
class Sources:
    """How env reads Secrets and ConfigMaps: name -> data (None when the object is missing)."""

    secret: Callable[[str], dict[str, bytes] | None]
    configmap: Callable[[str], dict[str, bytes] | None]


def environment(
    pod: JSON, container: JSON, image_env: dict[str, str], sources: Sources
) -> dict[str, str]:
    """kubelet_pods.go makeEnvironmentVariables: envFrom, then env in order (each may refer to
    earlier ones with ``$(VAR)``), over the image's ENV; the runtime adds HOSTNAME."""
    namespace = pod["metadata"].get("namespace") or "default"
    result: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind, read in (("configMapRef", sources.configmap), ("secretRef", sources.secret)):
            ref = source.get(kind)
            if not ref:
                continue
            data = read(ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                what = "configmap" if kind == "configMapRef" else "secret"
                raise ConfigError(f'{what} "{ref["name"]}" not found')
            for key, value in data.items():
                result[prefix + key] = value.decode()
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            result[name] = expand(str(var.get("value") or ""), result)
            continue
        frm = var["valueFrom"]
        if "fieldRef" in frm:
            result[name] = field_ref(pod, frm["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in frm or "configMapKeyRef" in frm:
            secret = "secretKeyRef" in frm
            ref = frm["secretKeyRef" if secret else "configMapKeyRef"]
            data = (sources.secret if secret else sources.configmap)(ref["name"])
            kind = "Secret" if secret else "ConfigMap"
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
            if ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise ConfigError(
                    f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}"
                )
            result[name] = data[ref["key"]].decode()
        elif "resourceFieldRef" in frm:
            result[name] = resource_field(container, frm["resourceFieldRef"])
    name, _ = hostname(pod)
    return {**image_env, "HOSTNAME": name, **result}


def resource_field(container: JSON, ref: JSON) -> str:
    """resourceFieldRef: limits/requests in units of ``divisor`` rounded up (cpu in cores)."""
    group, _, resource = str(ref["resource"]).partition(".")
    value = ((container.get("resources") or {}).get(group) or {}).get(resource)
    if value is None:
        return "0"  # upstream falls back to node allocatable; no node capacity is modelled here
    divisor = quantity(ref.get("divisor") or "1")
    return str(int((quantity(value) / divisor).to_integral_value(rounding="ROUND_CEILING")))


@dataclass(frozen=True)
class Probe:
    """A probe's settings with the API's defaults."""

    spec: JSON
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def probe(spec: JSON | None, container: JSON | None = None) -> Probe | None:
    """A probe of ``container``. An exec probe's command is expanded against the container's env
    entries as written, ``valueFrom`` ones as "" (prober.go runProbe, container/helpers.go
    ExpandContainerCommandOnlyStatic, v1.35.4)."""
    if not spec:
        return None
    if "exec" in spec and container is not None:
        static = {var["name"]: str(var.get("value") or "") for var in container.get("env") or []}
        command = [expand(str(arg), static) for arg in spec["exec"].get("command") or []]
        spec = {**spec, "exec": {**spec["exec"], "command": command}}
    return Probe(
        spec,
        float(spec.get("initialDelaySeconds") or 0),
        float(spec.get("periodSeconds") or 10),
        float(spec.get("timeoutSeconds") or 1),
        int(spec.get("successThreshold") or 1),
        int(spec.get("failureThreshold") or 3),
    )
