"""The kubelet's ``$(VAR)`` expansion, read from Kubernetes v1.35.4, for tests that check what a
container really gets from a manifest.

- third_party/forked/golang/expansion/expand.go ``Expand``: left to right, a ``$`` that is not the
  last character starts an operator: ``$$`` gives ``$``; ``$(`` up to the next ``)`` is a
  reference, replaced by the variable's value, or left as written when there is no such variable;
  ``$(`` with no ``)`` after it stays; ``$`` and any other character (a whole UTF-8 rune) stay.
- pkg/kubelet/kubelet_pods.go ``makeEnvironmentVariables``: each env entry with a value is
  expanded against the entries before it (and the service variables); ``valueFrom`` ones are not.
- pkg/kubelet/container/helpers.go ``ExpandContainerCommandAndArgs``: command and args against the
  container's final environment; ``ExpandContainerCommandOnlyStatic`` (prober.go, exec probes):
  against the env entries' own ``value`` fields as written, unexpanded, ``""`` for ``valueFrom``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def expand(text: str, variables: Mapping[str, str]) -> str:
    """``Expand(text, MappingFuncFor(variables))``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                out.append(variables[name] if name in variables else text[i : end + 1])
                i = end + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def container_view(
    container: Mapping[str, Any], value_from: Callable[[Mapping[str, Any]], str]
) -> dict[str, Any]:
    """What the runtime gets for ``container``: its environment (``value_from`` resolves a
    ``valueFrom``), command, args and readiness probe command, each expanded as the kubelet does."""
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if var.get("value"):
            env[var["name"]] = expand(var["value"], env)
        elif "valueFrom" in var:
            env[var["name"]] = value_from(var["valueFrom"])
        else:
            env[var["name"]] = ""
    static = {var["name"]: var.get("value") or "" for var in container.get("env") or []}
    probe = ((container.get("readinessProbe") or {}).get("exec") or {}).get("command")
    return {
        "env": env,
        "command": [expand(arg, env) for arg in container.get("command") or []],
        "args": [expand(arg, env) for arg in container.get("args") or []],
        "probe": None if probe is None else [expand(arg, static) for arg in probe],
    }
