"""`ci-runner train` behind the real Kueue (v0.17.0, with its webhooks) on the emulated cluster
with real nodes (slow): two trainings against a one-job quota both train, the second after
waiting in Kueue's words; a higher-priority workload preempts a training and the CI log names
Kueue; a LocalQueue that does not exist ends the run before anything is submitted; torchrun's
Job waits behind the same queue.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testing.emulated_cluster.harness import NAMESPACE, busybox
from testing.emulated_pipeline import (
    Site,
    assert_failed,
    assert_trained,
    ddp_train_yaml,
    failure_line,
    finish,
    job_name,
    pipeline,
    read_until,
    running_site,
    train,
    train_yaml,
)
from testing.kueue_objects import API, KueueObjects, condition

pytestmark = pytest.mark.slow
JSON = dict[str, Any]

LOCAL_QUEUE = "team-a"
CLUSTER_QUEUE = "training"
FLAVOR = "default-flavor"
# A training of the example asks for 2.5 CPUs: the launcher's 500m, and each worker's 1 (its
# setup containers' request, more than the worker's none). Three CPUs hold one training, not two;
# memory and disk are plenty, so the CPU alone decides.
QUOTA = {"cpu": "3", "memory": "64Gi", "ephemeral-storage": "1Ti"}
NO_QUOTA = re.compile(
    r"\[ci-runner\] queued in LocalQueue team-a \(ClusterQueue training\) for \w+: "
    r"couldn't assign flavors to pod set (launcher|worker): insufficient unused quota for cpu "
    r"in flavor default-flavor, \S+ more needed$"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("kueue-e2e")) as running:
        yield running


@pytest.fixture(scope="module")
def queue(site: Site) -> Iterator[KueueObjects]:
    """A ClusterQueue that holds one training, preempting lower priorities, and its LocalQueue
    in the pipelines' namespace, once Kueue says it is active. One for the module: Kueue keeps a
    deleted ResourceFlavor or ClusterQueue (its finalizer) until nothing uses it."""
    with KueueObjects(site.cluster.api) as kueue:
        kueue.resource_flavor(FLAVOR)
        kueue.cluster_queue(CLUSTER_QUEUE, FLAVOR, QUOTA)
        kueue.local_queue(NAMESPACE, LOCAL_QUEUE, CLUSTER_QUEUE)
        path = f"{API}/namespaces/{NAMESPACE}/localqueues/{LOCAL_QUEUE}"
        deadline = time.monotonic() + 30
        while (condition(site.cluster.api.get(path) or {}, "Active") or {}).get("status") != "True":
            assert time.monotonic() < deadline, site.cluster.api.get(path)
            time.sleep(0.2)
        yield kueue


def queued_config(make: Any = train_yaml, **kubernetes: object) -> dict[str, object]:
    config: dict[str, object] = make(local_queue=LOCAL_QUEUE, **kubernetes)
    return config


def index(log: list[str], pattern: str) -> int:
    """The first line of ``log`` that contains ``pattern``."""
    return next(i for i, line in enumerate(log) if pattern in line)


def test_two_trainings_against_a_one_job_quota_both_train_the_second_after_queueing(
    site: Site, queue: KueueObjects
) -> None:
    # Two CI jobs of one commit (the jobs' names differ by CI_JOB_ID).
    jobs = [
        pipeline(site, name, queued_config(), variables={"CI_JOB_ID": job_id})
        for name, job_id in (("kueue-a", "6001"), ("kueue-b", "6002"))
    ]
    trains = [job.start("train") for job in jobs]
    runs = [finish(job, train) for job, train in zip(jobs, trains, strict=True)]
    for run, name in zip(runs, ("kueue-a", "kueue-b"), strict=True):
        assert_trained(run, name)
    waited = [run for run in runs if any(NO_QUOTA.match(line) for line in run.log)]
    assert len(waited) == 1, "\n\n".join("\n".join(run.log) for run in runs)
    log = waited[0].log
    text = "\n".join(log)
    queued = next(i for i, line in enumerate(log) if NO_QUOTA.match(line))
    admitted = index(log, "[ci-runner] admitted by Kueue: ClusterQueue training reserved quota")
    assert queued < admitted < index(log, "Training. Epoch"), text
    assert f"in LocalQueue {LOCAL_QUEUE}" in log[admitted], text
    # Kueue's words say where it waits; the job's suspension adds no line of its own.
    assert not any(line.startswith("[ci-runner] queued: ") for line in log), text


def test_a_higher_priority_workload_preempts_a_training_and_the_log_names_kueue(
    site: Site, queue: KueueObjects
) -> None:
    queue.workload_priority_class("low", 10)
    queue.workload_priority_class("high", 1000)
    config = queued_config(workload_priority_class="low", on_preemption="fail")
    config["env"] = {**config["env"], "EPOCHS": "100000"}  # type: ignore[dict-item]
    job = pipeline(site, "kueue-preempted", config)
    train = job.start("train")
    seen = read_until(train, "Training. Epoch 1,")
    urgent = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "urgent",
            "labels": {
                "kueue.x-k8s.io/queue-name": LOCAL_QUEUE,
                "kueue.x-k8s.io/priority-class": "high",
            },
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        busybox("urgent", "sleep", "600", resources={"requests": {"cpu": "1"}})
                    ],
                }
            },
        },
    }
    jobs = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
    site.cluster.api.create(jobs, urgent)
    try:
        run = finish(job, train, seen)
    finally:
        site.cluster.api.delete(f"{jobs}/urgent", {"propagationPolicy": "Background"})
    text = "\n".join(run.log)
    name = job_name(run.log)
    evicted = [line for line in run.log if "[ci-runner] Kueue evicted Workload" in line]
    assert len(evicted) == 1, text
    # The admission Kueue takes back is not said again as a new one.
    after = run.log[run.log.index(evicted[0]) :]
    assert not any("[ci-runner] admitted by Kueue" in line for line in after), text
    assert re.fullmatch(
        r"\[ci-runner\] Kueue evicted Workload \S+ \(Preempted, InClusterQueue\): Preempted to "
        r"accommodate a workload .*",
        evicted[0],
    ), text
    message = failure_line(run)
    assert message.startswith(
        f"MPIJob {name} was preempted (Kueue LocalQueue {LOCAL_QUEUE}): suspended after it started"
    ), text
    assert_failed(run, message)


def test_a_local_queue_that_does_not_exist_ends_the_run_before_submitting(
    site: Site, queue: KueueObjects
) -> None:
    started = time.monotonic()
    config = train_yaml(local_queue="nope")
    run = train(site, "kueue-missing", config)
    text = "\n".join(run.log)
    assert time.monotonic() - started < 60, text
    assert run.code == 1, text
    line = (
        "ci-runner: error: train.yaml:{line}: kubernetes.local_queue: LocalQueue nope does not "
        f"exist in namespace {NAMESPACE}: Kueue would keep the job pending for ever; fix: name "
        "a LocalQueue of the namespace (kubectl get localqueues lists them), or ask the "
        "cluster's admin to create this one"
    )
    lines = [line for line in run.log if "kubernetes.local_queue" in line]
    assert len(lines) == 1 and re.fullmatch(
        re.escape(line).replace(r"\{line\}", r"\d+"), lines[0]
    ), text
    assert not any("submitted" in line for line in run.log), text


def test_a_torchrun_job_waits_behind_the_same_queue_and_trains(
    site: Site, queue: KueueObjects
) -> None:
    run = train(site, "kueue-ddp", queued_config(ddp_train_yaml))
    assert_trained(run, "kueue-ddp")
    text = "\n".join(run.log)
    name = job_name(run.log)
    assert f"[ci-runner] submitted Job {name} in namespace {NAMESPACE}" in run.log, text
    admitted = index(run.log, "[ci-runner] admitted by Kueue: ClusterQueue training")
    assert admitted < index(run.log, "Training. Epoch"), text
