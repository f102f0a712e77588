"""train.yaml's ``kubernetes.launcher.affinity``: a pod's ``affinity`` as Kubernetes writes it.

Checked here as far as its shape (a mapping of ``nodeAffinity``, ``podAffinity`` and
``podAntiAffinity``, each a mapping); the API server checks the rest when the MPIJob is created.
Kept as canonical JSON text, so that the config stays a frozen, comparable value.
"""

from __future__ import annotations

import json
from typing import Final

from ci_runner.config.engine import INVALID, At, Invalid, Kind
from ci_runner.config.yamlsource import YMapping, YNode, YSequence, key_path

AFFINITY_KINDS: Final = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_EXAMPLE: Final = "{nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ...}}"


def plain(node: YNode) -> object:
    """``node`` as plain data (mappings, lists, scalars)."""
    if isinstance(node, YMapping):
        return {entry.key: plain(entry.value) for entry in node}
    if isinstance(node, YSequence):
        return [plain(item) for item in node.items]
    return node.value


class Affinity(Kind[str]):
    """A pod's affinity, as JSON text."""

    doc = "mapping (a pod's affinity)"

    def check(self, node: YNode, at: At) -> str | Invalid:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, f"a mapping such as {_EXAMPLE}")
        ok = True
        for entry in node:
            if entry.key not in AFFINITY_KINDS:
                at.problem(
                    entry.key_line,
                    f"is not a kind of affinity ({', '.join(AFFINITY_KINDS)})",
                    "write the pod's affinity as Kubernetes does, e.g. " + _EXAMPLE,
                    path=key_path(at.path, entry.key),
                )
                ok = False
            elif not isinstance(entry.value, YMapping):
                at.problem(
                    entry.key_line,
                    "must be a mapping",
                    "write it as Kubernetes does, e.g. " + _EXAMPLE,
                    path=key_path(at.path, entry.key),
                )
                ok = False
        return json.dumps(plain(node), sort_keys=True) if ok else INVALID
