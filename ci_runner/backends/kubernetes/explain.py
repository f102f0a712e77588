"""Why a job failed, from what the cluster shows: pure functions over MPIJob, Pod, Event dicts.

Every failure's text is here, and the status lines that share their words (a queue's, a held
launcher's; :mod:`status_lines` has the others); the checks of a pod's status they stand on are
:mod:`podstatus`'s, the fix for an admission refusal :mod:`admission`'s. The tracker, the job's
kind and the backend ask.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from ci_runner import kueue_names
from ci_runner.backends.kubernetes.admission import listed, refusal_fix
from ci_runner.backends.kubernetes.podstatus import (
    IMAGE_PULL_REASONS,
    Role,
    condition,
    container_spec,
    container_states,
    memory_limit,
    pod_name,
    role,
    statuses,
    terminated,
)
from ci_runner.backends.kubernetes.resources import JSON
from ci_runner.backends.result import Failure, FailureKind
from ci_runner.backends.timed_out import mpijob_deadline_failure

# Waiting reasons of a container that will not start without a change to the job (a missing
# Secret key or ConfigMap, a command that keeps failing).
STUCK_REASONS: Final = (
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)
# A terminated container's reason when the runtime could not start it, with exit code 128 and
# the runtime's error as its message (containerd's CRI, pkg/cri/server/helpers.go:
# errorStartReason, errorStartExitCode).
START_ERROR: Final = "StartError"
# mpirun's report of a rank that died by a signal (OpenMPI 4.1 help-orterun.txt,
# [orterun:proc-aborted] and [orterun:proc-aborted-strsignal]).
RANK_SIGNALLED: Final = re.compile(
    r"\S+ noticed that process rank (?P<rank>\d+) with PID \d+ on node (?P<node>\S+) exited on "
    r"signal (?P<signal>\d+)(?: \((?P<name>[^)]*)\))?\."
)
SIGKILL: Final = 9
MEMORY_FIX: Final = (
    "raise resources.memory, or use less memory per rank (what ranks write to /dev/shm counts too)"
)
# On cgroup v2 the kubelet sets memory.oom.group on every container (Kubernetes v1.35.4
# pkg/kubelet/kuberuntime/kuberuntime_container_linux.go, unless singleProcessOOMKill): a rank over
# the limit ends the whole worker container, sshd and every rank in it, OOMKilled with 137.
WORKER_OOM: Final = (
    ": a rank went over the worker's memory limit and, on cgroup v2, the kernel ends the whole "
    f"container (memory.oom.group), sshd and every rank in it; fix: {MEMORY_FIX}"
)


def setup_failure(pod: JSON, who: str | None = None) -> Failure | None:
    """A worker failing before it is Ready: an init container (code fetch, pip) or its main
    container exited non-zero or was OOMKilled, or a container cannot start (CrashLoopBackOff,
    a missing Secret key). MPI Operator v0.8.2 reports none of this: it waits for the worker.
    ``who``: how the text names the pod (``worker <pod>`` unless given)."""
    name = pod_name(pod)
    who = who or f"worker {name}"
    for what, container in statuses(pod):
        state = container.get("state", {})
        cname = str(container.get("name", ""))
        end = state.get("terminated") or {}
        if end and end.get("exitCode", 0) != 0:
            code = int(end["exitCode"])
            where = f"{who}: {what} {cname}"
            if end.get("reason") == "OOMKilled":
                limit = container_spec(pod, cname).get("resources", {}).get("limits", {})
                memory = f", memory limit {limit['memory']}" if limit.get("memory") else ""
                return Failure(
                    FailureKind.OOM_KILLED,
                    f"{where} was OOMKilled (exit code {code}{memory})",
                    exit_code=code,
                    pod=name,
                    container=cname,
                )
            kind = FailureKind.SETUP if what == "init container" else FailureKind.WORKER_FAILED
            return Failure(kind, ended_line(where, end), code, pod=name, container=cname)
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            last = container.get("lastState", {}).get("terminated") or {}
            last_code = last.get("exitCode")
            after = f" (last exit code {last_code})" if last_code is not None else ""
            detail = f": {waiting['message']}" if waiting.get("message") else ""
            return Failure(
                FailureKind.SETUP,
                f"{who}: {what} {cname} is in {waiting['reason']}{after}{detail}",
                exit_code=last_code,
                pod=name,
                container=cname,
            )
    return None


def ended_line(where: str, end: JSON) -> str:
    """``where`` exited with its code; a container the runtime could not start (reason
    StartError, exit code 128: the kubelet's words for a failed create or exec, e.g. a command
    the image lacks) says so with the runtime's own message, which names what is missing."""
    code = end.get("exitCode")
    if end.get("reason") == START_ERROR:
        message = " ".join(str(end.get("message") or "no message from the runtime").split())
        return (
            f"{where} could not start ({START_ERROR}, exit code {code}): {message}; fix: use an "
            "image that has /bin/sh and the command (ci-runner's containers run their scripts "
            "with /bin/sh)"
        )
    return f"{where} exited with code {code}"


SIDECAR_FIX: Final = (
    "fix: ask the cluster's administrators to inject the proxy as a native sidecar (an init "
    "container with restartPolicy Always, which the kubelet stops when the others end: Istio "
    "1.27+ does by default, ENABLE_NATIVE_SIDECARS; Linkerd with "
    "config.beta.linkerd.io/proxy-enable-native-sidecar), or not to inject it in this namespace"
)


def sidecars_phrase(running: Sequence[str]) -> str:
    return f"container{'s' if len(running) > 1 else ''} {listed(running)}"


def held_line(pod: str, container: str, end: JSON, running: Sequence[str], grace: float) -> str:
    """The launcher's container ended but sidecars keep its pod running."""
    return (
        f"launcher container {container} in pod {pod} exited with code {end.get('exitCode')}, but "
        f"{sidecars_phrase(running)} keep{'' if len(running) > 1 else 's'} the pod running "
        "(injected as plain containers, they never stop, and MPI Operator never sees the "
        "launcher end); "
        f"ci-runner takes the launcher's exit code as the job's in {grace:.0f}s; {SIDECAR_FIX}"
    )


def held_failure(
    pod: str, container: str, end: JSON, running: Sequence[str], who: str | None = None
) -> Failure:
    """The launcher (``who``: another pod named so) failed in a pod its sidecars keep running
    (the Job never retries it)."""
    return Failure(
        FailureKind.EXIT_CODE,
        f"{ended_line(who or f'launcher {pod}', end)} (its pod kept running for "
        f"{sidecars_phrase(running)}: {SIDECAR_FIX})",
        exit_code=end.get("exitCode"),
        pod=pod,
        container=container,
    )


def not_ready_reason(pod: JSON) -> str:
    """What keeps a worker from Ready, in a few words."""
    for what, container in statuses(pod):
        state = container.get("state", {})
        if "terminated" in state and what == "init container":
            continue
        if container.get("ready") and what == "container":
            continue
        cname = container.get("name", "")
        if "waiting" in state:
            return f"{what} {cname} waiting ({state['waiting'].get('reason', 'no reason')})"
        if "running" in state:
            ready = "" if what == "init container" else ", not Ready"
            return f"{what} {cname} still running{ready}"
    return f"phase {pod.get('status', {}).get('phase', 'Pending')}"


def image_pull_failure(pod: JSON) -> Failure | None:
    """ErrImagePull / ImagePullBackOff on any container of the pod."""
    for status in container_states(pod):
        waiting = status.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            detail = waiting.get("message") or waiting["reason"]
            return Failure(
                FailureKind.IMAGE_PULL,
                f"pod {pod_name(pod)} cannot pull image {status.get('image', '?')} "
                f"({waiting['reason']}): {detail}",
                pod=pod_name(pod),
                container=str(status.get("name", "")) or None,
            )
    return None


def _queue(mpijob: JSON) -> str:
    """ " (Kueue LocalQueue q)" or " (queue q)" from the job's labels or scheduling policy."""
    metadata = mpijob.get("metadata", {})
    kueue = (metadata.get("labels") or {}).get(kueue_names.QUEUE_NAME_LABEL)
    if kueue:
        return f" (Kueue LocalQueue {kueue})"
    policy = mpijob.get("spec", {}).get("runPolicy", {}).get("schedulingPolicy") or {}
    return f" (queue {policy['queue']})" if policy.get("queue") else ""


def queued_line(mpijob: JSON, noun: str = "MPIJob") -> str:
    """The status line of a job suspended before it started (``noun``: its object's kind)."""
    return (
        f"queued: {noun} {pod_name(mpijob)} is suspended{_queue(mpijob)}; it starts when the "
        "queue admits it (kubernetes.setup_timeout does not run meanwhile)"
    )


def preempted_line(mpijob: JSON, noun: str = "MPIJob") -> str:
    """The status line of a job suspended after it started: preempted by its queue, and
    kubernetes.on_preemption is wait."""
    return (
        f"preempted: {noun} {pod_name(mpijob)} was suspended after it started{_queue(mpijob)}; "
        "its pods are deleted and it starts again when the queue resumes it "
        "(kubernetes.on_preemption: fail ends the run instead)"
    )


def preempted_failure(mpijob: JSON, noun: str = "MPIJob") -> Failure:
    """A job suspended after it started, when kubernetes.on_preemption is fail."""
    return Failure(
        FailureKind.PREEMPTED,
        f"{noun} {pod_name(mpijob)} was preempted{_queue(mpijob)}: suspended after it started, "
        "and kubernetes.on_preemption is fail (wait keeps the run waiting for the queue to "
        "resume it)",
    )


def resume_stall_failure(mpijob: JSON, seconds: float) -> Failure:
    """Every worker Ready after a resume, no launcher within kubernetes.setup_timeout, and the
    MPIJob says why (:func:`resume_stalled`)."""
    return Failure(
        FailureKind.SETUP,
        f"every worker is Ready but no launcher started within {round(seconds)}s of setup after "
        f"the resume (kubernetes.setup_timeout): MPIJob {pod_name(mpijob)} still has the "
        "condition Suspended=True while its spec.runPolicy.suspend is false, so MPI Operator "
        "has not resumed its launcher Job (it must update the Job's status first); fix: add "
        "update on jobs/status (API group batch) to the MPI Operator's ClusterRole",
    )


def resumed_line(mpijob: JSON, noun: str = "MPIJob") -> str:
    """The status line of a suspended job the queue lets run."""
    return f"resumed: the queue admitted {noun} {pod_name(mpijob)}; setting up"


def unschedulable_failure(pod: str, seconds: float, message: str) -> Failure:
    """``pod`` could not be placed for ``seconds`` (kubernetes.unschedulable_timeout)."""
    return Failure(
        FailureKind.UNSCHEDULABLE,
        f"pod {pod} stayed unschedulable for {round(seconds)}s: {message}",
        pod=pod,
    )


def setup_timeout_failure(not_ready: JSON | None, seconds: float) -> Failure:
    """Setting up took longer than kubernetes.setup_timeout: the first worker ``not_ready`` (and
    what it waits for), or the launcher that did not start when every worker is Ready."""
    waited = round(seconds)
    if not_ready is None:
        message = f"the launcher did not start within {waited}s (kubernetes.setup_timeout)"
        return Failure(FailureKind.SETUP, message)
    pod = pod_name(not_ready)
    message = (
        f"worker {pod} was not Ready after {waited}s of setup "
        f"(kubernetes.setup_timeout): {not_ready_reason(not_ready)}"
    )
    return Failure(FailureKind.SETUP, message, pod=pod)


def deleted_failure(mpijob_name: str, noun: str = "MPIJob") -> Failure:
    """The job was deleted (by someone else) before it finished."""
    return Failure(FailureKind.CANCELLED, f"{noun} {mpijob_name} was deleted before it finished")


def container_log_lines(text: str) -> list[str]:
    """The lines of a failed container's log tail worth showing (blank ones dropped)."""
    return [line for line in text.splitlines() if line.strip()]


def with_log_line(failure: Failure, line: str) -> Failure:
    """``failure`` with the last line its container wrote (pip's error, the script's fix) as
    the reason's end; ``line`` is masked already."""
    return replace(failure, message=f"{failure.message}: {line}")


def operator_failure(event: JSON) -> Failure | None:
    """MPI Operator's MPIJobFailed Warning Event: it could not create a pod or the launcher Job
    (a ResourceQuota, PodSecurity, an admission webhook); v0.8.2 sets no condition for it. Not
    when the object was there already: the operator's informer had not seen its own creation
    yet, and its next sync finds it (mpi_job_controller.go returns the error, and the work
    queue tries again); seen on a loaded machine, where it failed a healthy run."""
    if ALREADY_EXISTS.search(str(event.get("message", ""))):
        return None
    return refusal_failure(event, "MPIJobFailed", "MPI Operator cannot create the job's pods")


# kube-apiserver's AlreadyExists (apimachinery's errors.NewAlreadyExists): `<resource> "<name>"
# already exists` ends the operator's message.
ALREADY_EXISTS: Final = re.compile(r'"[^"]*" already exists\s*$')


def launcher_job_failure(event: JSON) -> Failure | None:
    """The Job controller's FailedCreate Warning Event on the launcher Job: a ResourceQuota,
    PodSecurity or an admission webhook refused the launcher's pod (controller_utils.go,
    ``Error creating: ...``). Neither the MPIJob nor its status says so."""
    return refusal_failure(
        event, "FailedCreate", "the launcher Job cannot create the launcher's pod"
    )


def refusal_failure(
    event: JSON, reason: str, what: str, fixes: Callable[[str, str], str] = refusal_fix
) -> Failure | None:
    """A Warning Event of ``reason`` as a REFUSED failure: ``what``, its message, and the fix
    when admission refused (``fixes``:
    :func:`~ci_runner.backends.kubernetes.admission.refusal_fix`, or its twin for a kind whose
    pods are otherwise made)."""
    if event.get("reason") != reason or event.get("type") != "Warning":
        return None
    message = str(event.get("message", "")).strip()
    namespace = str((event.get("metadata") or {}).get("namespace", ""))
    fix = fixes(message, namespace)
    return Failure(FailureKind.REFUSED, f"{what}: {message}{f'; fix: {fix}' if fix else ''}")


def launcher_job_warning(event: JSON) -> str | None:
    """Another Warning Event of the launcher Job, as a status line; None for a Normal one."""
    if event.get("type") != "Warning":
        return None
    return f"launcher Job: {event.get('reason', '')}: {str(event.get('message', '')).strip()}"


def validation_failure(events: Iterable[JSON]) -> Failure | None:
    """MPI Operator's ValidationError Event: the job will never start."""
    for event in events:
        if event.get("reason") == "ValidationError":
            return Failure(
                FailureKind.VALIDATION,
                f"MPI Operator rejected the MPIJob: {event.get('message', '')}",
            )
    return None


def disrupted_by(pod: JSON) -> str | None:
    """``<reason>: <message>`` of the pod's DisruptionTarget condition; None without one."""
    cond = condition(pod, "DisruptionTarget")
    if cond is None:
        return None
    reason = str(cond.get("reason") or "DisruptionTarget")
    message = str(cond.get("message") or "").strip()
    return f"{reason}: {message}" if message else reason


def disruption(pod: JSON) -> Failure | None:
    """A worker the cluster stopped (preemption, a drain's eviction, a taint, the kubelet's
    shutdown), from its DisruptionTarget condition: sshd exits 0 on SIGTERM, so the pod ends
    Succeeded and only the launcher's failure would show."""
    detail = disrupted_by(pod)
    if detail is None:
        return None
    return Failure(
        FailureKind.WORKER_FAILED,
        f"worker {pod_name(pod)} was stopped by the cluster ({detail}); the launcher then failed",
        pod=pod_name(pod),
    )


def explain_failed_job(mpijob: JSON, pods: Mapping[str, JSON]) -> Failure:
    """Why a job whose Failed condition is True failed, the root cause first.

    A worker's OOMKilled or crash shows up only as the launcher failing (MPI Operator #90), so
    workers are looked at before the launcher's exit code.
    """
    failed = condition(mpijob, "Failed") or {}
    reason = str(failed.get("reason", ""))
    workers = sorted((p for p in pods.values() if role(p) is Role.WORKER), key=pod_name)
    launchers = sorted((p for p in pods.values() if role(p) is Role.LAUNCHER), key=pod_name)
    roles = [*((pod, Role.WORKER) for pod in workers), *((pod, Role.LAUNCHER) for pod in launchers)]
    for pod, who in roles:
        end = terminated(pod)
        if end and end.get("reason") == "OOMKilled":
            limit = memory_limit(pod)
            suffix = f" (memory limit {limit})" if limit else ""
            why = WORKER_OOM if who is Role.WORKER else ""
            return Failure(
                FailureKind.OOM_KILLED,
                f"{who.value} {pod_name(pod)} was OOMKilled{suffix}{why}",
                exit_code=end.get("exitCode"),
                pod=pod_name(pod),
            )
    if reason.startswith("DeadlineExceeded"):
        deadline = mpijob.get("spec", {}).get("runPolicy", {}).get("activeDeadlineSeconds")
        return mpijob_deadline_failure(deadline)
    for pod in workers:
        disrupted = disruption(pod)
        if disrupted is not None:
            return disrupted
    for pod in workers:
        end = terminated(pod)
        if end and end.get("exitCode", 0) != 0:
            return Failure(
                FailureKind.WORKER_FAILED,
                ended_line(f"worker {pod_name(pod)}", end),
                exit_code=end["exitCode"],
                pod=pod_name(pod),
            )
    for pod in reversed(launchers):
        end = terminated(pod)
        if end and end.get("exitCode", 0) != 0:
            return Failure(
                FailureKind.EXIT_CODE,
                ended_line(f"launcher {pod_name(pod)}", end),
                exit_code=end["exitCode"],
                pod=pod_name(pod),
            )
    message = failed.get("message") or "no reason given"
    return Failure(FailureKind.UNKNOWN, f"MPIJob failed: {reason or 'Failed'}: {message}")


def rank_signal(failure: Failure, log_tail: Sequence[str], pods: Mapping[str, JSON]) -> Failure:
    """A launcher failure that mpirun's last lines explain as a rank killed by a signal: that rank
    and its worker first. On cgroup v1 a rank over its worker's memory limit is killed alone by
    the kernel (not the container's main process, sshd), so no pod says OOMKilled; SIGKILL under
    a memory limit is said to be that, most likely. (On cgroup v2 the container ends OOMKilled:
    :data:`WORKER_OOM`.)"""
    if failure.kind is not FailureKind.EXIT_CODE:
        return failure
    found = next((m for line in reversed(log_tail) if (m := RANK_SIGNALLED.search(line))), None)
    if found is None:
        return failure
    worker = found["node"].split(".")[0]  # the hostfile's <pod>.<service>.<namespace>.svc
    name = f" ({found['name']})" if found["name"] else ""
    message = f"rank {found['rank']} on {worker} was killed by signal {found['signal']}{name}"
    limit = memory_limit(pods.get(worker, {}))
    fix = ""
    if int(found["signal"]) == SIGKILL and limit:
        message += (
            f", most likely for going over the workers' memory limit of {limit} (on cgroup v1 "
            "the kernel kills that rank alone; sshd lives on)"
        )
        fix = f"; fix: {MEMORY_FIX}"
    return replace(failure, message=f"{message}; {failure.message}{fix}")
