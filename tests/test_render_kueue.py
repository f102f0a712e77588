"""kubernetes.local_queue: both kinds of job join Kueue's LocalQueue, created suspended; only the
job's own object carries Kueue's labels (its pods, ConfigMap, Secret and Service do not)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ci_runner.config.types import KubernetesOptions, TrainConfig
from ci_runner.render_job import render_objects
from testing.plan_cases import trusted_plan
from testing.render_cases import LOCAL, SMALL, TORCHRUN

KUEUE = KubernetesOptions(local_queue="team-a", workload_priority_class="low", queue_timeout=60)


def _suspend(job: dict[str, Any]) -> Any:
    spec = job["spec"]
    return spec["runPolicy"].get("suspend") if job["kind"] == "MPIJob" else spec.get("suspend")


def _kueue_labels(obj: dict[str, Any]) -> dict[str, str]:
    labels = obj.get("metadata", {}).get("labels") or {}
    return {key: value for key, value in labels.items() if key.startswith("kueue.x-k8s.io/")}


@pytest.mark.parametrize("config", [SMALL, TORCHRUN], ids=["horovod", "torchrun"])
def test_a_job_in_a_local_queue_is_labelled_and_created_suspended(config: TrainConfig) -> None:
    plan = trusted_plan(replace(config, kubernetes=KUEUE), LOCAL)
    job, *others = render_objects(plan)
    assert _kueue_labels(job) == {
        "kueue.x-k8s.io/queue-name": "team-a",
        "kueue.x-k8s.io/priority-class": "low",
    }
    assert _suspend(job) is True
    pod_templates = (
        [spec["template"] for spec in job["spec"]["mpiReplicaSpecs"].values()]
        if job["kind"] == "MPIJob"
        else [job["spec"]["template"]]
    )
    assert [_kueue_labels(obj) for obj in [*others, *pod_templates]] == [{}] * (
        len(others) + len(pod_templates)
    )


@pytest.mark.parametrize("config", [SMALL, TORCHRUN], ids=["horovod", "torchrun"])
def test_a_job_without_a_local_queue_starts_at_once(config: TrainConfig) -> None:
    job = render_objects(trusted_plan(config, LOCAL))[0]
    assert _kueue_labels(job) == {}
    assert _suspend(job) is None


def test_a_priority_class_alone_is_not_rendered_without_its_queue() -> None:
    k8s = KubernetesOptions(local_queue="team-a")
    job = render_objects(trusted_plan(replace(SMALL, kubernetes=k8s), LOCAL))[0]
    assert _kueue_labels(job) == {"kueue.x-k8s.io/queue-name": "team-a"}
