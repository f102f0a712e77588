"""train.yaml's ``kubernetes.launcher.affinity``: a pod's ``affinity`` as Kubernetes writes it.

Checked here as far as its shape (a mapping of ``nodeAffinity``, ``podAffinity`` and
``podAntiAffinity``, each a mapping) and its numbers (JSON has no NaN or infinity); the API
server checks the rest when the MPIJob is created. Kept as canonical JSON text, so that the
config stays a frozen, comparable value.
"""

from __future__ import annotations

import json
import math
from typing import Final

from ci_runner.config.engine import INVALID, At, Invalid, Kind
from ci_runner.config.yamlsource import YMapping, YNode, YScalar, YSequence, index_path, key_path

AFFINITY_KINDS: Final = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_EXAMPLE: Final = "{nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ...}}"


def plain(node: YNode) -> object:
    """``node`` as plain data (mappings, lists, scalars)."""
    if isinstance(node, YMapping):
        return {entry.key: plain(entry.value) for entry in node}
    if isinstance(node, YSequence):
        return [plain(item) for item in node.items]
    return node.value


def non_finite(node: YNode, path: str) -> list[tuple[str, YScalar]]:
    """The path and node of every ``.nan``, ``.inf`` and ``-.inf`` in ``node`` (at ``path``):
    ``json.dumps`` would write them as NaN and Infinity, which no JSON reader (the API server's
    included) accepts."""
    if isinstance(node, YMapping):
        return [
            found for entry in node for found in non_finite(entry.value, key_path(path, entry.key))
        ]
    if isinstance(node, YSequence):
        return [
            found
            for index, item in enumerate(node.items)
            for found in non_finite(item, index_path(path, index))
        ]
    if isinstance(node.value, float) and not math.isfinite(node.value):
        return [(path, node)]
    return []


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
        for path, scalar in non_finite(node, at.path):
            at.problem(
                scalar.line,
                f"is {scalar.text}, a number Kubernetes cannot read (JSON has no NaN or infinity)",
                f"write a finite number, or quote it ('{scalar.text}') if you mean the text",
                path=path,
            )
            ok = False
        return json.dumps(plain(node), sort_keys=True, allow_nan=False) if ok else INVALID
