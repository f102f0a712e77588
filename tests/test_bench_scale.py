"""Bench 7's scripted nodes hold the jobs it submits: every size's workers and launcher at once
(the pods of the 64-rank job may still be going when the 256-rank job's are scheduled), by
each resource the pods ask for as ci-runner renders them, so that a new request (as
ephemeral-storage once was) fails here, not at worker 100 after the bench's first size."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from bench.scale import PATTERN, PODS_PER_NODE, SIZES, TRAIN_YAML, node_specs
from ci_runner.config.quantity import quantity_value
from ci_runner.config.schema import load_config
from ci_runner.render import render_mpijob
from testing.node_objects import node_object
from testing.plan_cases import CONTEXT, trusted_plan


def pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """What the scheduler counts of a pod: per resource, the larger of its init containers'
    largest request and its containers' sum (a request left out is its limit's)."""

    def requests(container: dict[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity_value(str(value)) for name, value in asked.items()}

    total: dict[str, Decimal] = {}
    for container in spec["containers"]:
        for name, value in requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


def test_the_nodes_hold_every_size_at_once() -> None:
    pods: list[dict[str, Decimal]] = []
    for ranks in SIZES:
        text = TRAIN_YAML.format(workers=ranks, pattern=PATTERN, namespace="ml-1")
        replicas = render_mpijob(trusted_plan(load_config(text), CONTEXT))["spec"][
            "mpiReplicaSpecs"
        ]
        for replica in replicas.values():
            pods += [pod_requests(replica["template"]["spec"])] * int(replica.get("replicas", 1))
    assert len(pods) == sum(SIZES) + len(SIZES)
    names = set().union(*pods)
    largest = {name: max(pod.get(name, Decimal(0)) for pod in pods) for name in names}
    assert largest["ephemeral-storage"] > 0  # what the workers asked for when this was written
    for spec in node_specs():
        allocatable = node_object(spec, 10250)["status"]["allocatable"]
        for name, asked in largest.items():
            assert name in allocatable, f"{spec.name} has no {name}"
            room = quantity_value(allocatable[name]) / asked if asked else PODS_PER_NODE
            assert room >= PODS_PER_NODE, (
                f"{spec.name} holds {int(room)} pods of {name} {asked}, not {PODS_PER_NODE}"
            )
    assert len(node_specs()) * PODS_PER_NODE >= len(pods)
