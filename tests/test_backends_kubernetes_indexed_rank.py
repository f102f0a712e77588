"""An Indexed Job's failed node said by its first failing rank (IndexedJobKind.refine), over what
real torchrun (torch 2.13.0, two ranks, gloo) wrote: tests/data/torchrun/*.log (their
capture.sh ran the scripts as /tmp/ci-runner-torchrun-fixture/train.py), read as two nodes of
one rank each (rank r on node r) unless said otherwise. The pods are as the Job controller and
the kubelet leave them (tests/test_backends_kubernetes_indexed_job.py has their sources).

The backend reads the failure back from the saved log's end, not from the sink's tail of 60
lines, which a traceback and torchrun's report outgrow: checked through KubernetesBackend's end
against the in-process API server (testing/fake_kube/server.py; no controller, so the test plays
the Job controller's and the kubelet's part in the JSON it hands the follower)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.backend import KubernetesBackend
from ci_runner.backends.kubernetes.indexed_job import IndexedJobKind
from ci_runner.backends.kubernetes.mpijob import MpiJobKind
from ci_runner.backends.kubernetes.options import JobOptions
from ci_runner.backends.kubernetes.resources import JOBS, PODS
from ci_runner.backends.kubernetes.traits import traits_of
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.backends.torchrun_failure import LOG_READ_BYTES
from ci_runner.clock import ManualClock
from ci_runner.console import Console
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.fake_kube.server import FakeKubeServer
from testing.paths import TEST_DATA
from testing.torchrun_jobs import indexed_job_manifest, service_manifest

JSON = dict[str, Any]
FIXTURES = TEST_DATA / "torchrun"
CODE_DIR = "/tmp/ci-runner-torchrun-fixture"  # where capture.sh ran them: the pods' /ci-runner/code
START = "2026-12-05T10:00:00Z"
POD = {0: "j-0-b2c4d", 1: "j-1-x7k2p"}
FAILED_INDEX = (
    "FailureTarget",
    "MaxFailedIndexesExceeded",
    "Job has exceeded the specified maximal number of failed indexes",
)


def fixture(name: str) -> list[str]:
    return (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()


def node(index: int, code: int, reason: str = "Error", at: str = "10:05:00") -> JSON:
    """Node ``index``'s pod once its torchrun exited with ``code``."""
    end = {"exitCode": code, "reason": reason, "finishedAt": f"2026-12-05T{at}Z"}
    return {
        "metadata": {
            "name": POD[index],
            "creationTimestamp": START,
            "labels": {
                "batch.kubernetes.io/job-name": "j",
                "batch.kubernetes.io/job-completion-index": str(index),
                "ci-runner/job": "j",
            },
        },
        "spec": {"containers": [{"name": "torchrun", "resources": {"limits": {"memory": "4Gi"}}}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "torchrun", "state": {"terminated": end}}],
        },
    }


def failed_job(failed_indexes: str = "1") -> JSON:
    kind, reason, message = FAILED_INDEX
    condition = {"type": kind, "status": "True", "reason": reason, "message": message}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "uid": "u1", "creationTimestamp": START},
        "spec": {"completions": 2},
        "status": {"startTime": START, "failedIndexes": failed_indexes, "conditions": [condition]},
    }


def refined(log: str, *pods: JSON, kind: IndexedJobKind | None = None) -> Failure:
    """The Job's failure, as the cluster says it, then refined by ``log``."""
    kind = kind or IndexedJobKind("j", ranks_per_node=1, code_dir=CODE_DIR)
    seen = {p["metadata"]["name"]: p for p in pods}
    verdict = kind.ended(failed_job(), seen)
    assert verdict is not None and verdict.failure is not None
    return kind.refine(verdict.failure, fixture(log), seen)


# Node 1's torchrun exited 1 (its rank failed); the Job controller then stopped node 0 (143).
NODES = (node(1, 1), node(0, 143, at="10:05:09"))


@pytest.mark.parametrize(
    ("log", "message"),
    [
        # no @record: rank 1's own traceback in the log (rank 0's gloo error came of it)
        ("raise", "node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom at 0.5 (train.py:10)"),
        # @record: the report's traceback, from rank 1's error file
        (
            "raise_record",
            "node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom at 0.5 (train.py:11)",
        ),
        # before init_process_group: no [rank1]: prefix
        (
            "raise_early",
            "node 1 (pod j-1-x7k2p): rank 1 raised KeyError: 'batch_size' (train.py:8)",
        ),
        ("exit3", "node 1 (pod j-1-x7k2p): rank 1 exited with code 3; its last line: giving up"),
        # SIGKILL, and the pod is not OOMKilled: the kernel killed that rank alone
        (
            "killed",
            "node 1 (pod j-1-x7k2p): rank 1 was killed by signal 9 (SIGKILL), most likely for "
            "going over the node's memory limit of 4Gi (the kernel killed that rank alone, not "
            "torchrun); fix: raise resources.memory, or use less memory per rank (what ranks "
            "write to /dev/shm counts too)",
        ),
    ],
)
def test_the_failed_node_is_said_by_its_first_failing_rank(log: str, message: str) -> None:
    assert refined(log, *NODES) == Failure(
        FailureKind.EXIT_CODE, message, exit_code=1, pod=POD[1], container="torchrun"
    )


def test_a_log_that_shows_no_failed_rank_leaves_the_exit_code() -> None:
    plain = Failure(
        FailureKind.EXIT_CODE,
        "node 1 (pod j-1-x7k2p) exited with code 1",
        exit_code=1,
        pod=POD[1],
        container="torchrun",
    )
    assert refined("ok", *NODES) == plain
    assert IndexedJobKind("j").refine(plain, [], {POD[1]: NODES[0]}) == plain


def test_without_the_checkout_where_is_the_files_name() -> None:
    kind = IndexedJobKind("j", ranks_per_node=1)
    assert refined("raise", *NODES, kind=kind).message == (
        "node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom at 0.5 (train.py:10)"
    )


def test_the_node_named_is_the_failing_ranks_not_the_first_to_end() -> None:
    """Node 0's torchrun ended first (its rank's all_reduce lost its peer), so the Job
    controller failed index 0; rank 1, on node 1, raised first."""
    first = node(0, 1, at="10:04:58")
    kind = IndexedJobKind("j", ranks_per_node=1, code_dir=CODE_DIR)
    seen = {POD[0]: first, POD[1]: node(1, 1)}
    verdict = kind.ended(failed_job("0"), seen)
    assert verdict is not None and verdict.failure is not None
    assert verdict.failure.pod == POD[0]
    assert kind.refine(verdict.failure, fixture("raise"), seen) == Failure(
        FailureKind.EXIT_CODE,
        "node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom at 0.5 (train.py:10)",
        exit_code=1,
        pod=POD[1],
        container="torchrun",
    )
    # Two ranks a node: both ranks ran on node 0; unknown (0): the failed node.
    for ranks_per_node in (2, 0):
        kind = IndexedJobKind("j", ranks_per_node=ranks_per_node, code_dir=CODE_DIR)
        assert kind.refine(verdict.failure, fixture("raise"), seen).message == (
            "node 0 (pod j-0-b2c4d): rank 1 raised ValueError: boom at 0.5 (train.py:10)"
        )


def test_other_failures_stay_as_the_cluster_says_them() -> None:
    oom = refined("raise", node(1, 137, "OOMKilled"), NODES[1])
    assert (oom.kind, oom.message) == (
        FailureKind.OOM_KILLED,
        "node 1 (pod j-1-x7k2p) was OOMKilled (memory limit 4Gi); fix: raise resources.memory, "
        "or use less memory per rank (what ranks write to /dev/shm counts too)",
    )
    not_started = refined("raise", node(1, 128, "StartError"), NODES[1])
    assert not_started.message.startswith("node 1 (pod j-1-x7k2p) could not start (StartError")


def test_an_mpijob_reads_the_sinks_tail_alone() -> None:
    assert traits_of(MpiJobKind("j")).failure_log_bytes == 0
    assert IndexedJobKind("j").failure_log_bytes == LOG_READ_BYTES


def two_nodes_log() -> list[str]:
    """raise.log as node 1's, then node 0's torchrun's report: its rank 0 failed (exit code 1,
    its all_reduce's peer gone)."""
    lines = fixture("raise")
    report = lines[next(i for i, line in enumerate(lines) if line.startswith("E1205")) :]
    root = report.index("Root Cause (first observed failure):")
    node0 = [
        "  rank      : 0 (local_rank: 0)" if i > root and line.startswith("  rank ") else line
        for i, line in enumerate(report)
    ]
    return [*lines, *node0]


def test_the_backend_says_it_from_the_saved_log_beyond_the_sinks_tail(tmp_path: Path) -> None:
    """A run that trained, then failed on two nodes: the sink's 60-line tail holds their
    reports, not rank 1's traceback, which the saved log holds whole."""
    sink = LogSink(tmp_path / "train.log", lambda text: None)
    for step in range(500):
        sink.feed(f"[0]<std>:step {step} loss 0.5\n[1]<std>:step {step} loss 0.5\n")
    sink.feed("".join(f"{line}\n" for line in two_nodes_log()))
    kind = IndexedJobKind("j", ranks_per_node=1, code_dir=CODE_DIR)
    plain = Failure(FailureKind.EXIT_CODE, "node 1 (pod j-1-x7k2p) exited with code 1", 1, POD[1])
    assert kind.refine(plain, sink.tail, {POD[1]: NODES[0]}).message == (
        "node 1 (pod j-1-x7k2p): rank 1 exited with code 1"
    )
    stderr = io.StringIO()
    with FakeKubeServer() as server:
        options = JobOptions(
            api_client=kubernetes.client.ApiClient(server.configuration()),
            namespace="ml",
            manifest=indexed_job_manifest("j"),
            secret=JobSecret(secret_name("j"), (), {}),
            mpijob_name="j",
            workers=2,
            launcher_container="torchrun",
            unschedulable_timeout=600,
            service=service_manifest("j"),
            ranks_per_node=1,
            code_dir=CODE_DIR,
        )
        backend = KubernetesBackend(options, sink, Console(io.StringIO(), stderr), ManualClock())
        backend.tracker.apply(WatchUpdate(PODS, SYNC, NODES), 0)
        backend.tracker.apply(WatchUpdate(JOBS, SYNC, (failed_job(),)), 1)
        verdict = backend.tracker.verdict()
        assert verdict is not None
        ended = backend._end(verdict)
    message = "node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom at 0.5 (train.py:10)"
    assert (ended.outcome, ended.failure) == (
        Outcome.FAILED,
        Failure(FailureKind.EXIT_CODE, message, exit_code=1, pod=POD[1], container="torchrun"),
    )
    assert stderr.getvalue().splitlines() == [
        f"[ci-runner] Job j failed: {message}",
        "[ci-runner] deleted Job j, its pods, its Service and its Secret",
    ]
