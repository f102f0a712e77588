"""explain: the root cause of a failed MPIJob, from MPIJob and Pod dicts."""

from __future__ import annotations

from typing import Any

from ci_runner.backends.kubernetes import explain
from ci_runner.backends.result import Failure, FailureKind

JSON = dict[str, Any]


def pod(name: str, role: str, **state: Any) -> JSON:
    status: JSON = {"phase": "Failed" if state else "Running"}
    if state:
        status["containerStatuses"] = [{"name": "c", "image": "img:1", "state": state}]
    return {
        "metadata": {"name": name, "labels": {"training.kubeflow.org/job-role": role}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "8Gi"}}}]},
        "status": status,
    }


def failed_job(reason: str = "BackoffLimitExceeded/", deadline: int | None = None) -> JSON:
    spec: JSON = {"runPolicy": {"activeDeadlineSeconds": deadline} if deadline else {}}
    return {
        "spec": spec,
        "status": {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Failed", "status": "True", "reason": reason, "message": "it broke"},
            ]
        },
    }


def exited(code: int, reason: str = "Error") -> JSON:
    return {"terminated": {"exitCode": code, "reason": reason}}


def test_worker_oom_beats_the_launchers_exit_code() -> None:
    pods = {
        "j-launcher-abcde": pod("j-launcher-abcde", "launcher", **exited(1)),
        "j-worker-0": pod("j-worker-0", "worker"),
        "j-worker-1": pod("j-worker-1", "worker", **exited(137, "OOMKilled")),
    }
    assert explain.explain_failed_job(failed_job(), pods) == Failure(
        FailureKind.OOM_KILLED,
        "worker j-worker-1 was OOMKilled (memory limit 8Gi): a rank went over the worker's memory "
        "limit and, on cgroup v2, the kernel ends the whole container (memory.oom.group), sshd and "
        "every rank in it; fix: raise resources.memory, or use less memory per rank (what ranks "
        "write to /dev/shm counts too)",
        exit_code=137,
        pod="j-worker-1",
    )


def test_a_worker_crash_beats_the_launchers_exit_code() -> None:
    pods = {
        "j-launcher-abcde": pod("j-launcher-abcde", "launcher", **exited(1)),
        "j-worker-0": pod("j-worker-0", "worker", **exited(2)),
    }
    assert explain.explain_failed_job(failed_job(), pods) == Failure(
        FailureKind.WORKER_FAILED, "worker j-worker-0 exited with code 2", 2, "j-worker-0"
    )


def test_the_launchers_exit_code() -> None:
    pods = {"j-launcher-abcde": pod("j-launcher-abcde", "launcher", **exited(3))}
    assert explain.explain_failed_job(failed_job(), pods) == Failure(
        FailureKind.EXIT_CODE, "launcher j-launcher-abcde exited with code 3", 3, "j-launcher-abcde"
    )


def test_deadline() -> None:
    assert explain.explain_failed_job(failed_job("DeadlineExceeded", 600), {}) == Failure(
        FailureKind.DEADLINE,
        "the job ran past its time limit of 600s (activeDeadlineSeconds) and was stopped",
    )


def test_nothing_to_go_on_gives_the_conditions_words() -> None:
    assert explain.explain_failed_job(failed_job("MPIJobEvicted"), {}) == Failure(
        FailureKind.UNKNOWN, "MPIJob failed: MPIJobEvicted: it broke"
    )


def test_image_pull_failure() -> None:
    waiting = pod("j-worker-0", "worker", waiting={"reason": "ImagePullBackOff", "message": "m"})
    assert explain.image_pull_failure(waiting) == Failure(
        FailureKind.IMAGE_PULL,
        "pod j-worker-0 cannot pull image img:1 (ImagePullBackOff): m",
        pod="j-worker-0",
        container="c",
    )
    assert explain.image_pull_failure(pod("j-worker-0", "worker")) is None


def test_setup_failure_of_a_container_that_cannot_start() -> None:
    loop = pod("j-worker-0", "worker")
    loop["status"]["containerStatuses"] = [
        {
            "name": "worker",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
        }
    ]
    assert explain.setup_failure(loop) == Failure(
        FailureKind.SETUP,
        "worker j-worker-0: container worker is in CrashLoopBackOff (last exit code 2): "
        "back-off 10s",
        exit_code=2,
        pod="j-worker-0",
        container="worker",
    )
    missing = pod("j-worker-1", "worker")
    message = "couldn't find key token in Secret ml/j-secrets"
    missing["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-code",
            "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}},
        }
    ]
    assert explain.setup_failure(missing) == Failure(
        FailureKind.SETUP,
        f"worker j-worker-1: init container fetch-code is in CreateContainerConfigError: {message}",
        pod="j-worker-1",
        container="fetch-code",
    )
    assert explain.setup_failure(pod("j-worker-2", "worker")) is None


def test_an_mpijobfailed_warning_is_a_refusal() -> None:
    event = {
        "type": "Warning",
        "reason": "MPIJobFailed",
        "message": "launcher pod created failed: x",
    }
    assert explain.operator_failure(event) == Failure(
        FailureKind.REFUSED,
        "MPI Operator cannot create the job's pods: launcher pod created failed: x",
    )
    assert explain.operator_failure({**event, "type": "Normal"}) is None


def test_the_operator_creating_what_it_made_already_fails_nothing() -> None:
    # Its informer lagged behind its own create; the next sync finds the Job and goes on.
    message = 'launcher pod created failed: jobs.batch "j-launcher" already exists'
    event = {"type": "Warning", "reason": "MPIJobFailed", "message": message}
    assert explain.operator_failure(event) is None


def test_what_keeps_a_worker_from_ready() -> None:
    waiting = pod("j-worker-0", "worker")
    waiting["status"]["initContainerStatuses"] = [
        {"name": "fetch-code", "state": {"terminated": {"exitCode": 0}}},
        {"name": "install-requirements", "state": {"running": {}}},
    ]
    assert explain.not_ready_reason(waiting) == "init container install-requirements still running"
    pulling = pod("j-worker-0", "worker", waiting={"reason": "ContainerCreating"})
    assert explain.not_ready_reason(pulling) == "container c waiting (ContainerCreating)"


LAUNCHER_FAILED = Failure(
    FailureKind.EXIT_CODE, "launcher j-launcher-abcde exited with code 137", 137, "j-launcher-abcde"
)
# mpirun's own words (OpenMPI 4.1, help-orterun.txt), as the emulated cluster's launcher printed
# them for a rank over its worker's memory limit.
KILLED = (
    "mpirun noticed that process rank 1 with PID 361 on node j-worker-1.j.ml.svc exited on "
    "signal 9 (Killed)."
)


def test_a_rank_killed_under_a_memory_limit_is_named_with_the_likely_cause() -> None:
    pods = {"j-worker-1": pod("j-worker-1", "worker")}
    tail = ["-" * 74, KILLED, "-" * 74]
    assert explain.rank_signal(LAUNCHER_FAILED, tail, pods) == Failure(
        FailureKind.EXIT_CODE,
        "rank 1 on j-worker-1 was killed by signal 9 (Killed), most likely for going over the "
        "workers' memory limit of 8Gi (on cgroup v1 the kernel kills that rank alone; sshd lives "
        "on); launcher j-launcher-abcde exited with code 137; fix: raise resources.memory, or use "
        "less memory per rank (what ranks write to /dev/shm counts too)",
        137,
        "j-launcher-abcde",
    )


def test_a_rank_killed_by_another_signal_or_without_a_limit_says_only_that() -> None:
    segv = (
        "mpirun noticed that process rank 0 with PID 7 on node j-worker-0.j.ml.svc exited on "
        "signal 11."
    )
    assert explain.rank_signal(LAUNCHER_FAILED, [segv], {}).message == (
        "rank 0 on j-worker-0 was killed by signal 11; "
        "launcher j-launcher-abcde exited with code 137"
    )
    assert explain.rank_signal(LAUNCHER_FAILED, [KILLED], {}).message == (
        "rank 1 on j-worker-1 was killed by signal 9 (Killed); "
        "launcher j-launcher-abcde exited with code 137"
    )


def test_rank_signal_leaves_other_failures_and_other_logs_alone() -> None:
    assert explain.rank_signal(LAUNCHER_FAILED, ["Exit code:    3"], {}) == LAUNCHER_FAILED
    oom = Failure(FailureKind.OOM_KILLED, "worker j-worker-1 was OOMKilled", 137, "j-worker-1")
    assert explain.rank_signal(oom, [KILLED], {}) == oom


def test_failure_texts_of_what_the_tracker_decides() -> None:
    assert explain.unschedulable_failure("j-worker-0", 600.4, "0/3 nodes") == Failure(
        FailureKind.UNSCHEDULABLE,
        "pod j-worker-0 stayed unschedulable for 600s: 0/3 nodes",
        pod="j-worker-0",
    )
    assert explain.setup_timeout_failure(None, 1800.0) == Failure(
        FailureKind.SETUP, "the launcher did not start within 1800s (kubernetes.setup_timeout)"
    )
    assert explain.deleted_failure("j") == Failure(
        FailureKind.CANCELLED, "MPIJob j was deleted before it finished"
    )
    assert explain.container_log_lines("a\n\n  \nfix: b\n") == ["a", "fix: b"]
    failed = Failure(FailureKind.SETUP, "worker w: init container fetch exited with code 1")
    assert explain.with_log_line(failed, "fix: set CI_RUNNER_GIT_TOKEN").message == (
        "worker w: init container fetch exited with code 1: fix: set CI_RUNNER_GIT_TOKEN"
    )


def test_a_disrupted_worker_is_named_with_its_disruption_target_reason() -> None:
    # sshd exits 0 on SIGTERM: the drained worker ends Succeeded; its condition says why.
    drained = pod("j-worker-1", "worker", **exited(0, "Completed"))
    drained["status"]["phase"] = "Succeeded"
    drained["status"]["conditions"] = [
        {"type": "Ready", "status": "False"},
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        },
    ]
    pods = {
        "j-launcher-abcde": pod("j-launcher-abcde", "launcher", **exited(1)),
        "j-worker-0": pod("j-worker-0", "worker"),
        "j-worker-1": drained,
    }
    assert explain.explain_failed_job(failed_job(), pods) == Failure(
        FailureKind.WORKER_FAILED,
        "worker j-worker-1 was stopped by the cluster (EvictionByEvictionAPI: Eviction API: "
        "evicting); the launcher then failed",
        pod="j-worker-1",
    )
    drained["status"]["conditions"][1]["status"] = "False"
    assert explain.explain_failed_job(failed_job(), pods).kind is FailureKind.EXIT_CODE


RUNC_NOT_FOUND = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: '
    "no such file or directory: unknown"
)
START_FIX = (
    "fix: use an image that has /bin/sh and the command (ci-runner's containers run their "
    "scripts with /bin/sh)"
)


def test_a_container_the_runtime_could_not_start_says_the_runtimes_words() -> None:
    worker = pod("j-worker-0", "worker")
    worker["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-code",
            "state": {
                "terminated": {"exitCode": 128, "reason": "StartError", "message": RUNC_NOT_FOUND}
            },
        }
    ]
    assert explain.setup_failure(worker) == Failure(
        FailureKind.SETUP,
        "worker j-worker-0: init container fetch-code could not start (StartError, exit code "
        f"128): {RUNC_NOT_FOUND}; {START_FIX}",
        exit_code=128,
        pod="j-worker-0",
        container="fetch-code",
    )
    launcher = pod(
        "j-launcher-abcde",
        "launcher",
        terminated={"exitCode": 128, "reason": "StartError", "message": RUNC_NOT_FOUND},
    )
    assert explain.explain_failed_job(failed_job(), {"j-launcher-abcde": launcher}) == Failure(
        FailureKind.EXIT_CODE,
        "launcher j-launcher-abcde could not start (StartError, exit code 128): "
        f"{RUNC_NOT_FOUND}; {START_FIX}",
        exit_code=128,
        pod="j-launcher-abcde",
    )


def test_a_launcher_held_by_two_sidecars_names_both() -> None:
    line = explain.held_line("j-launcher-x", "mpirun", {"exitCode": 0}, ["agent", "proxy"], 60)
    assert line.startswith(
        "launcher container mpirun in pod j-launcher-x exited with code 0, but containers agent "
        "and proxy keep the pod running (injected as plain containers, they never stop, and MPI "
        "Operator never sees the launcher end); ci-runner takes the launcher's exit code as the "
        "job's in 60s; fix: "
    )
