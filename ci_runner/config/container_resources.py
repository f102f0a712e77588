"""train.yaml's ``resources.setup`` and ``resources.launcher``: what ci-runner's own containers
request and are limited to.

A mapping ``{cpu, memory}`` sets both the request and the limit (a key left out keeps its
default); the word ``none`` sets nothing, so that the namespace's LimitRange defaults apply
(plugin/pkg/admission/limitranger: defaults fill only what a container leaves unset).
"""

from __future__ import annotations

from typing import Final, TypedDict

from ci_runner.config.engine import INVALID, At, Field, Invalid, Record
from ci_runner.config.scalars import Quantity
from ci_runner.config.types import ContainerResources
from ci_runner.config.yamlsource import YMapping, YNode, YScalar

NONE_WORD: Final = "none"


class ContainerResourcesValues(TypedDict, total=False):
    cpu: str
    memory: str


class NoneOrResources(Record[ContainerResourcesValues, ContainerResources]):
    """A ``{cpu, memory}`` mapping over ``default``, or ``none``: no requests or limits."""

    def __init__(self, default: ContainerResources, whose: str) -> None:
        def build(
            values: ContainerResourcesValues, at: At, ok: bool, keys: frozenset[str]
        ) -> ContainerResources | Invalid:
            if not ok:
                return INVALID
            return ContainerResources(
                cpu=values.get("cpu", default.cpu), memory=values.get("memory", default.memory)
            )

        super().__init__(
            Field("cpu", Quantity(), f"CPU {whose}.", "500m", f"`{default.cpu}`"),
            Field("memory", Quantity(), f"Memory {whose}.", "1Gi", f"`{default.memory}`"),
            build=build,
            doc="`none` or mapping",
        )

    def check(self, node: YNode, at: At) -> ContainerResources | Invalid:
        if isinstance(node, YScalar) and node.value == NONE_WORD:
            return ContainerResources()
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "none or a mapping such as {cpu: 500m, memory: 1Gi}")
        return super().check(node, at)
