"""The Kubernetes backend's run (on a thread, as the scripted tests run it) on real nodes: what
the scripted kubelet played until real nodes could, now kubelet v1.35.4, containerd and runc
running busybox in the MPIJob's pods (slow: real pods; root)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ci_runner.backends.result import Failure, FailureKind, Outcome
from testing.backend_harness import Cluster, cluster_on, submitted, succeeded
from testing.emulated_cluster import containerd, imagestore
from testing.emulated_cluster.harness import ABSENT, Emulated, busybox, emulated
from testing.mpijob_manifests import JOB, mpijob_manifest
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario
from testing.waiting import wait_for

pytestmark = pytest.mark.slow
JSON = dict[str, Any]
LOG = ["[0]<stdout>:epoch 1 loss 0.9", "[1]<stdout>:epoch 1 loss 0.8"]
RUN = 120.0  # real seconds a run may take here (pods start, a Job's 10 s back-off)
# A worker as sshd is one: it runs until it is told to stop (SIGTERM), then exits 0.
SERVE = "trap 'exit 0' TERM; sleep 3600 & wait"
# A process that ignores SIGTERM: the kubelet kills it at the end of its grace period.
DEAF = "trap '' TERM; while true; do sleep 1; done"
# Like ABSENT, refused at once; tagged into the nodes' containerd while the kubelet backs off,
# and removed after.
LATE = "127.0.0.1:1/ci-runner/late:1"
GPU = "nvidia.com/gpu"
GATE = "/gate"  # a directory of this machine the test and the pods share (hostPath)


@pytest.fixture(scope="module")
def nodes() -> Iterator[Emulated]:
    with emulated(nodes=2) as running:
        yield running


@pytest.fixture
def cluster(nodes: Emulated, tmp_path: Path) -> Iterator[Cluster]:
    assert nodes.side.control is not None
    with cluster_on(nodes.side.control, tmp_path) as running:
        yield running


def echo(*lines: str) -> str:
    return "; ".join(f"echo {shlex.quote(line)}" for line in lines)


def on_busybox(
    manifest: JSON, launcher: str, worker: str = SERVE, gate: Path | None = None
) -> JSON:
    """``manifest`` with each pod's main container running ``launcher`` or ``worker`` with
    busybox's sh, asking for little (``gate``: a directory of this machine at :data:`GATE` in
    every pod)."""
    for role, script in (("Launcher", launcher), ("Worker", worker)):
        pod = manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        main = pod["containers"][0]
        main.update(busybox(main["name"], "sh", "-c", script))
        main["resources"] = {"limits": {"cpu": "100m", "memory": "64Mi"}}
        pod.pop("initContainers", None)
        if gate is not None:
            pod["volumes"] = [{"name": "gate", "hostPath": {"path": str(gate)}}]
            main["volumeMounts"] = [{"name": "gate", "mountPath": GATE}]
    return manifest


def gate(tmp_path: Path) -> Path:
    directory = tmp_path / "gate"
    directory.mkdir()
    return directory


def until_opened(then: str) -> str:
    """A script that waits for the test to create ``GATE/open``, then runs ``then``."""
    return f"until [ -e {GATE}/open ]; do sleep 0.2; done; {then}"


def launchers(cluster: Cluster, count: int = 1) -> list[str]:
    """The launcher pods ci-runner said were running, once it said ``count`` of them."""
    prefix = "[ci-runner] launcher running (pod "

    def said() -> list[str] | None:
        names = [line[len(prefix) : -1] for line in cluster.log.lines if line.startswith(prefix)]
        return names if len(names) >= count else None

    names = wait_for(f"{count} launcher(s) running", said, timeout=RUN)
    for name in names:
        assert re.fullmatch(rf"{JOB}-launcher-[a-z0-9]{{5}}", name), name
    return names


def started(cluster: Cluster) -> list[str]:
    return [submitted(cluster), "[ci-runner] workers ready 1/2", "[ci-runner] workers ready 2/2"]


def test_a_native_sidecar_in_the_launcher_pod_stops_when_the_launcher_ends(
    cluster: Cluster,
) -> None:
    """A service mesh's proxy injected as a native sidecar (an init container with restartPolicy
    Always, which keeps running): the kubelet stops it once the launcher has ended, and the log
    ci-runner follows is the launcher container's alone."""
    manifest = on_busybox(mpijob_manifest(wait_for_workers=True), echo(*LOG))
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    proxy = busybox("istio-proxy", "sh", "-c", f"echo proxy up; {SERVE}")
    launcher["initContainers"] = [{**proxy, "restartPolicy": "Always"}]
    cluster.started(manifest)
    result = cluster.result(timeout=RUN)
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        *started(cluster),
        f"[ci-runner] launcher running (pod {launchers(cluster)[0]})",
        *LOG,
        *succeeded(),
    ]
    assert cluster.leftovers() == []


def test_a_plain_sidecar_that_never_stops_holds_the_launcher_pod_its_exit_code_decides(
    cluster: Cluster,
) -> None:
    """A mesh's proxy injected as a plain container runs on after the launcher's container
    exits 0: the pod stays Running and the Job never completes, so after 60 s (the ManualClock)
    ci-runner takes the launcher's exit code and ends the job."""
    manifest = on_busybox(mpijob_manifest(wait_for_workers=True), f"{echo(*LOG)}; sleep 2")
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["containers"].append(busybox("istio-proxy", "sh", "-c", SERVE))
    cluster.started(manifest)
    name = launchers(cluster)[0]
    held = (
        f"[ci-runner] launcher container launcher in pod {name} exited with code 0, but container "
        "istio-proxy keeps the pod running (injected as plain containers, they never stop, and MPI "
        "Operator never sees the launcher end); ci-runner takes the launcher's exit code as the "
        "job's in 60s; fix: ask the cluster's administrators to inject the proxy as a native "
        "sidecar (an init container with restartPolicy Always, which the kubelet stops when the "
        "others end: Istio 1.27+ does by default, ENABLE_NATIVE_SIDECARS; Linkerd with "
        "config.beta.linkerd.io/proxy-enable-native-sidecar), or not to inject it in this "
        "namespace"
    )
    cluster.log.wait_for(held)
    pod = cluster.admin.get(f"/api/v1/namespaces/{cluster.namespace}/pods/{name}")
    assert pod is not None and pod["status"]["phase"] == "Running"
    cluster.clock.advance(60)
    result = cluster.result(timeout=RUN)
    assert result.outcome is Outcome.SUCCEEDED
    assert cluster.log.lines == [
        *started(cluster),
        f"[ci-runner] launcher running (pod {name})",
        *LOG,
        held,
        *succeeded(),
    ]
    assert cluster.leftovers() == []


def test_an_image_that_fails_to_pull_then_appears_in_the_runtime_lets_the_workers_start(
    nodes: Emulated, cluster: Cluster
) -> None:
    """The workers' image is refused, then tagged into each node's containerd during the
    kubelet's back-off: its next try finds it (IfNotPresent) and the run goes on."""
    manifest = on_busybox(mpijob_manifest(wait_for_workers=True), echo(*LOG))
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["image"] = LATE
    cluster.started(manifest)
    retrying = [
        f"[ci-runner] pod {JOB}-worker-{i} cannot pull its image yet (ErrImagePull): the kubelet "
        "retries; giving up after 300s"
        for i in range(2)
    ]
    for line in retrying:
        cluster.log.wait_for(line)
    assert nodes.side.real_nodes is not None
    layouts = [node.layout for node in nodes.side.real_nodes.nodes]
    try:
        for layout in layouts:
            tagged = containerd.ctr(layout, "images", "tag", imagestore.BUSYBOX_IMAGE, LATE)
            assert tagged.returncode == 0, tagged.stderr
        result = cluster.result(timeout=RUN)
    finally:
        for layout in layouts:
            containerd.ctr(layout, "images", "rm", LATE)
    assert result.outcome is Outcome.SUCCEEDED
    lines = cluster.log.lines
    assert sorted(lines[1:3]) == retrying
    assert [lines[0], *lines[3:]] == [
        *started(cluster),
        f"[ci-runner] launcher running (pod {launchers(cluster)[0]})",
        *LOG,
        *succeeded(),
    ]


def test_an_image_that_never_pulls_fails_the_job_after_300_s_in_containerd_s_words(
    cluster: Cluster,
) -> None:
    """ci-runner's grace for a pull the kubelet retries (300 s on the ManualClock), then the
    failure carries the real ErrImagePull's error."""
    manifest = on_busybox(mpijob_manifest(workers=1, wait_for_workers=True), echo(*LOG))
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["image"] = ABSENT
    cluster.started(manifest)
    retrying = (
        f"[ci-runner] pod {JOB}-worker-0 cannot pull its image yet (ErrImagePull): the kubelet "
        "retries; giving up after 300s"
    )
    cluster.log.wait_for(retrying)
    cluster.clock.advance(300)  # the grace period: the kubelet kept failing
    result = cluster.result(timeout=RUN)
    message = (
        f"pod {JOB}-worker-0 cannot pull image {ABSENT} (ErrImagePull): failed to pull and unpack "
        f'image "{ABSENT}": failed to resolve reference "{ABSENT}": failed to do request: Head '
        '"http://127.0.0.1:1/v2/ci-runner/absent/manifests/1": dial tcp 127.0.0.1:1: connect: '
        "connection refused"
    )
    assert cluster.log.lines == [
        submitted(cluster),
        retrying,
        f"[ci-runner] MPIJob {JOB} failed: {message}",
        f"[ci-runner] deleted MPIJob {JOB} and its pods",
    ]
    assert result.failure == Failure(
        FailureKind.IMAGE_PULL, message, pod=f"{JOB}-worker-0", container="worker"
    )
    assert cluster.leftovers() == []


def test_a_launcher_that_fails_once_under_the_backoff_limit_is_replaced_and_succeeds(
    cluster: Cluster, tmp_path: Path
) -> None:
    """backoffLimit 1: the Job controller makes a second launcher pod after its 10 s back-off;
    ci-runner follows that one's log and the job succeeds."""
    statuses = cluster.mpijob_statuses()  # as the operator writes them (deleted at the end)
    failing = f"touch {GATE}/failed-once; echo '[0]<stderr>:connection refused' >&2; exit 1"
    script = f"if [ -e {GATE}/failed-once ]; then {echo(*LOG)}; else {failing}; fi"
    manifest = mpijob_manifest(wait_for_workers=True, backoff_limit=1)
    cluster.started(on_busybox(manifest, script, gate=gate(tmp_path)))
    result = cluster.result(timeout=RUN)
    first, second = launchers(cluster, 2)
    assert first != second
    assert result.outcome is Outcome.SUCCEEDED
    # The operator counted the failed launcher; the second one's pod Succeeded decided the job.
    launcher = [status.get("replicaStatuses", {}).get("Launcher") for status in statuses]
    assert {"failed": 1} in launcher
    assert cluster.log.lines == [
        *started(cluster),
        f"[ci-runner] launcher running (pod {first})",
        "[0]<stderr>:connection refused",
        f"[ci-runner] launcher running (pod {second})",
        *LOG,
        *succeeded(),
    ]


# kube-scheduler 1.35's text for a worker no node can hold (5 GPUs; each node has 4).
UNSCHEDULABLE = (
    f"0/2 nodes are available: 2 Insufficient {GPU}. no new claims to deallocate, "
    f"preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
)


def advertise_gpus(nodes: Emulated, node: str, count: int | None) -> None:
    """``count`` GPUs in ``node``'s capacity (none: removed), as an administrator advertises an
    extended resource no device plugin manages; the kubelet copies it to allocatable."""
    path = f"/api/v1/nodes/{node}"
    value = None if count is None else str(count)
    nodes.api.merge_patch(f"{path}/status", {"status": {"capacity": {GPU: value}}})
    wait_for(
        f"{node} with {value} {GPU} allocatable",
        lambda: ((nodes.api.get(path) or {})["status"]["allocatable"].get(GPU) == value) or None,
    )


@pytest.fixture
def gpus(nodes: Emulated) -> Iterator[None]:
    """Each node advertises 4 GPUs during the test."""
    for node in ("node-1", "node-2"):
        advertise_gpus(nodes, node, 4)
    yield
    for node in ("node-1", "node-2"):
        advertise_gpus(nodes, node, None)


def test_workers_unschedulable_until_a_node_has_room_then_run_past_the_timeout(
    nodes: Emulated, cluster: Cluster, gpus: None, tmp_path: Path
) -> None:
    """Workers wait (the scheduler's words in the CI log) until node-1 advertises more GPUs;
    once they run, the unschedulable timeout no longer applies."""
    manifest = on_busybox(
        mpijob_manifest(wait_for_workers=True), until_opened(echo(*LOG)), gate=gate(tmp_path)
    )
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"][GPU] = 5
    job = cluster.started(manifest, unschedulable_timeout=600)
    message = job.workers_unschedulable()
    pending = f"[ci-runner] workers pending: {message}"
    cluster.log.wait_for(pending)
    advertise_gpus(nodes, "node-1", 10)  # the scheduler tries again: both fit on node-1
    launcher = launchers(cluster)[0]
    cluster.clock.advance(900)  # past the unschedulable timeout (not setup_timeout's 1800 s)
    (tmp_path / "gate" / "open").touch()
    assert cluster.result(timeout=RUN).outcome is Outcome.SUCCEEDED
    assert message == UNSCHEDULABLE
    assert cluster.log.lines == [
        submitted(cluster),
        pending,
        *started(cluster)[1:],
        f"[ci-runner] launcher running (pod {launcher})",
        *LOG,
        *succeeded(),
    ]


def test_a_foreground_deletion_by_someone_else_holds_the_mpijob_until_its_pods_are_gone(
    cluster: Cluster,
) -> None:
    """kubectl delete --cascade=foreground: the MPIJob stays, being deleted, while its pods take
    their grace period (their processes ignore SIGTERM); ci-runner says who ended the run."""
    manifest = on_busybox(mpijob_manifest(wait_for_workers=True), f"{echo(*LOG)}; {DEAF}", DEAF)
    for spec in manifest["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = 5
    job = cluster.started(manifest)
    cluster.log.wait_for(LOG[-1])
    lines = [*started(cluster), f"[ci-runner] launcher running (pod {launchers(cluster)[0]})", *LOG]
    assert cluster.log.lines == lines
    path = MPIJOBS.format(ns=cluster.namespace) + f"/{JOB}"
    cluster.admin.delete(path, {"propagationPolicy": "Foreground"})
    wait_for("the 3 pods terminating", lambda: len(job.pods()) == 3 and all(terminating(job)))
    mpijob = job.mpijob  # still there: the garbage collector waits for the pods
    assert mpijob["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert mpijob["metadata"]["deletionTimestamp"]
    result = cluster.result(timeout=RUN)
    message = f"MPIJob {JOB} was deleted before it finished"
    assert cluster.log.lines == [*lines, f"[ci-runner] {message}"]
    assert result.failure == Failure(FailureKind.CANCELLED, message)
    assert cluster.leftovers() == []


def terminating(job: JobScenario) -> list[bool]:
    """For each pod of ``job``, whether it is being deleted."""
    return [bool(pod["metadata"].get("deletionTimestamp")) for pod in job.listed()]
