"""Why a batch/v1 Indexed Job (``distributed: torchrun``) failed, and its nodes' status lines:
pure functions over Job, Pod and Event dicts, in :mod:`explain`'s words, each node named by its
completion index and its pod (``node 1 (pod train-3f2a9c1-1-x7k2p)``).

The Job controller (kubernetes v1.35.4, pkg/controller/job/job_controller.go) ends a Job with a
condition whose reason says which rule ended it: with ``backoffLimitPerIndex: 0`` and
``maxFailedIndexes: 0`` (ci-runner's) the first failed node is ``MaxFailedIndexesExceeded``
("Job has exceeded the specified maximal number of failed indexes"); ``FailedIndexes`` ("Job has
failed indexes") once every index ended and one failed (no ``maxFailedIndexes``);
``BackoffLimitExceeded``, ``DeadlineExceeded`` (its ``activeDeadlineSeconds``) and
``PodFailurePolicy``. Since ``JobPodReplacementPolicy`` and ``JobManagedBy`` (GA) it writes
``FailureTarget`` (or ``SuccessCriteriaMet``) first, then ``Failed`` (``Complete``) once its pods
have ended. Which node failed the job is the pods' to tell, ``status.failedIndexes`` first.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from ci_runner.backends.kubernetes.admission import node_refusal_fix
from ci_runner.backends.kubernetes.explain import (
    MEMORY_FIX,
    SIDECAR_FIX,
    START_ERROR,
    disrupted_by,
    ended_line,
    not_ready_reason,
    refusal_failure,
    setup_failure,
    sidecars_phrase,
)
from ci_runner.backends.kubernetes.explain import (
    held_failure as launcher_held_failure,
)
from ci_runner.backends.kubernetes.podstatus import condition, memory_limit, pod_name, statuses
from ci_runner.backends.kubernetes.resources import COMPLETION_INDEX_LABEL, JSON
from ci_runner.backends.kubernetes.status_lines import LineKey, StatusLine, Topic
from ci_runner.backends.result import Failure, FailureKind
from ci_runner.backends.timed_out import mpijob_deadline_failure
from ci_runner.backends.torchrun_failure import RankFailure, first_failure

# The Job's terminal reasons (k8s.io/api v0.35.4 batch/v1/types.go, JobReason*); the Job
# controller also records each as a Warning Event on the Job (job_controller.go,
# trackJobStatusAndRemoveFinalizers), which the condition already says.
TERMINAL_REASONS: Final = (
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "PodFailurePolicy",
)
# A pod stopped by its own activeDeadlineSeconds (pkg/kubelet/active_deadline.go) or evicted by
# its kubelet under node pressure (pkg/kubelet/eviction/helpers.go): the pod's status.reason.
POD_DEADLINE: Final = "DeadlineExceeded"
EVICTED: Final = "Evicted"
# names.MaxGeneratedNameLength (apiserver's storage/names): a generateName prefix is cut to it.
MAX_GENERATED_NAME: Final = 58
_GENERATED: Final = re.compile(r"(?P<prefix>.*-(?P<index>\d+)-)[a-z0-9]{5}")


def completion_index(pod: JSON) -> int | None:
    """The pod's completion index: its label (PodIndexLabel, v1.28+), else its annotation."""
    metadata = pod.get("metadata", {})
    for values in (metadata.get("labels"), metadata.get("annotations")):
        text = str((values or {}).get(COMPLETION_INDEX_LABEL, ""))
        if text.isdigit():
            return int(text)
    return None


def name_prefix(job_name: str, index: int) -> str:
    """The generateName of Job ``job_name``'s pods of ``index`` (indexed_job_utils.go,
    podGenerateNameWithIndex: ``<job>-<index>-``, the name cut to fit)."""
    append = f"-{index}-"
    prefix = job_name + append
    if len(prefix) > MAX_GENERATED_NAME:
        prefix = prefix[: MAX_GENERATED_NAME - len(append)] + append
    return prefix


def index_of(pod: str, job_name: str) -> int | None:
    """The completion index in the name of a pod of Job ``job_name``; None for another's."""
    found = _GENERATED.fullmatch(pod)
    if found is None:
        return None
    index = int(found["index"])
    return index if found["prefix"] == name_prefix(job_name, index) else None


def node(pod: JSON) -> str:
    """``node <index> (pod <name>)``."""
    index = completion_index(pod)
    return f"pod {pod_name(pod)}" if index is None else f"node {index} (pod {pod_name(pod)})"


# -- status lines ---------------------------------------------------------------------------


def pending_line(message: str) -> StatusLine:
    """Node pods the scheduler cannot place (every node's pod asks for the same)."""
    return StatusLine(LineKey(Topic.PENDING, ("node", message)), f"nodes pending: {message}")


def ready_line(ready: int, nodes: int) -> str:
    return f"nodes ready {ready}/{nodes}"


def held_line(pod: str, container: str, end: JSON, running: Sequence[str], grace: float) -> str:
    """Node 0's ``container`` ended but sidecars keep its pod running."""
    return (
        f"node 0's container {container} in pod {pod} exited with code {end.get('exitCode')}, "
        f"but {sidecars_phrase(running)} keep{'' if len(running) > 1 else 's'} the pod running "
        "(injected as plain containers, they never stop, and the Job controller never sees the "
        f"node end); ci-runner takes node 0's exit code as the job's in {grace:.0f}s; "
        f"{SIDECAR_FIX}"
    )


def held_failure(pod: str, container: str, end: JSON, running: Sequence[str]) -> Failure:
    """Node 0 failed in a pod its sidecars keep running."""
    return launcher_held_failure(pod, container, end, running, who=f"node 0 (pod {pod})")


def setup_timeout_failure(not_ready: JSON | None, seconds: float) -> Failure:
    """Setting up took longer than kubernetes.setup_timeout: the first node not started."""
    waited = round(seconds)
    if not_ready is None:
        message = f"the nodes did not all start within {waited}s (kubernetes.setup_timeout)"
        return Failure(FailureKind.SETUP, message)
    message = (
        f"{node(not_ready)} had not started after {waited}s of setup "
        f"(kubernetes.setup_timeout): {not_ready_reason(not_ready)}"
    )
    return Failure(FailureKind.SETUP, message, pod=pod_name(not_ready))


def node_setup_failure(pod: JSON) -> Failure | None:
    """A node failing before torchrun starts (:func:`explain.setup_failure`'s words)."""
    return setup_failure(pod, node(pod))


# -- the Job controller's Events ------------------------------------------------------------


def refused(event: JSON) -> Failure | None:
    """The Job controller's FailedCreate Warning Event: a ResourceQuota, PodSecurity or an
    admission webhook refused a node's pod (pkg/controller/controller_utils.go, CreatePods:
    ``Error creating: ...``). Neither the Job's conditions nor a pod say so."""
    return refusal_failure(
        event, "FailedCreate", "the Job cannot create its nodes' pods", node_refusal_fix
    )


def job_warning(event: JSON) -> str | None:
    """Another Warning Event of the Job, as a status line; None for a Normal one and for those
    that echo its terminal condition."""
    if event.get("type") != "Warning" or event.get("reason") in TERMINAL_REASONS:
        return None
    return f"Job: {event.get('reason', '')}: {str(event.get('message', '')).strip()}"


# -- why it failed --------------------------------------------------------------------------


def failed_indexes(job: JSON) -> set[int]:
    """``status.failedIndexes`` (``"1,3-5"``; with backoffLimitPerIndex) as a set."""
    found: set[int] = set()
    for part in str(job.get("status", {}).get("failedIndexes") or "").split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit():
            found.update(range(int(first), int(last if last.isdigit() else first) + 1))
    return found


def explain_failed_job(job: JSON, pods: Mapping[str, JSON]) -> Failure:
    """Why a Job whose Failed (or FailureTarget) condition is True failed, in one line: the
    deadline, else the node that failed first (of the failed indexes) and why."""
    failed = condition(job, "Failed") or condition(job, "FailureTarget") or {}
    reason = str(failed.get("reason", ""))
    if reason == "DeadlineExceeded":
        return mpijob_deadline_failure(job.get("spec", {}).get("activeDeadlineSeconds"))
    for pod in _nodes_by_blame(job, pods):
        found = node_failure(pod)
        if found is not None:
            return found
    message = failed.get("message") or "no reason given"
    return Failure(FailureKind.UNKNOWN, f"Job failed: {reason or 'Failed'}: {message}")


def _nodes_by_blame(job: JSON, pods: Mapping[str, JSON]) -> list[JSON]:
    """The Job's node pods since it last started (a resume makes new ones), those of its
    failed indexes first, then by when they failed, then by index."""
    started = str(job.get("status", {}).get("startTime") or "")
    blamed = failed_indexes(job)
    nodes = [
        pod
        for pod in pods.values()
        if completion_index(pod) is not None
        and str(pod.get("metadata", {}).get("creationTimestamp") or "~") >= started
    ]
    return sorted(
        nodes,
        key=lambda pod: (
            completion_index(pod) not in blamed,
            _failed_at(pod),
            completion_index(pod),
        ),
    )


def _failed_at(pod: JSON) -> str:
    """When the pod failed (RFC 3339, which sorts as text); "~" (after every time) if unknown."""
    times = [
        str(status["state"]["terminated"].get("finishedAt") or "~")
        for _, status in statuses(pod)
        if (status.get("state", {}).get("terminated") or {}).get("exitCode", 0) != 0
    ]
    disrupted = condition(pod, "DisruptionTarget")
    if disrupted is not None:
        times.append(str(disrupted.get("lastTransitionTime") or "~"))
    return min(times, default="~")


def node_failure(pod: JSON) -> Failure | None:
    """Why one node failed: OOMKilled, stopped by the cluster, its own deadline, evicted, its
    setup, or torchrun's exit code; None for a node that did not fail."""
    who, name = node(pod), pod_name(pod)
    for _, status in statuses(pod):
        end = status.get("state", {}).get("terminated") or {}
        if end.get("reason") == "OOMKilled":
            limit = memory_limit(pod)
            suffix = f" (memory limit {limit})" if limit else ""
            return Failure(
                FailureKind.OOM_KILLED,
                f"{who} was OOMKilled{suffix}; fix: {MEMORY_FIX}",
                exit_code=end.get("exitCode"),
                pod=name,
                container=str(status.get("name", "")) or None,
            )
    stopped = _stopped(pod, who)
    if stopped is not None:
        return stopped
    for what, status in statuses(pod):
        end = status.get("state", {}).get("terminated") or {}
        if not end or end.get("exitCode", 0) == 0:
            continue
        if what == "init container":
            return setup_failure(pod, who)
        code = int(end["exitCode"])
        container = str(status.get("name", "")) or None
        return Failure(FailureKind.EXIT_CODE, ended_line(who, end), code, name, container)
    return _pod_failed(pod, who)


def _stopped(pod: JSON, who: str) -> Failure | None:
    """A node the cluster stopped: preempted, evicted, drained (DisruptionTarget), or its own
    activeDeadlineSeconds; its exit code (torchrun's on SIGTERM) is not the cause."""
    disrupted = disrupted_by(pod)
    if disrupted is not None:
        return Failure(
            FailureKind.WORKER_FAILED,
            f"{who} was stopped by the cluster ({disrupted})",
            pod=pod_name(pod),
        )
    status = pod.get("status", {})
    if status.get("reason") == POD_DEADLINE:
        deadline = pod.get("spec", {}).get("activeDeadlineSeconds")
        limit = f" of {deadline}s" if deadline else ""
        return Failure(
            FailureKind.DEADLINE,
            f"{who} ran past its own time limit{limit} (activeDeadlineSeconds) and was stopped",
            pod=pod_name(pod),
        )
    if status.get("reason") == EVICTED:
        message = str(status.get("message") or "").strip() or "no message"
        return Failure(
            FailureKind.WORKER_FAILED, f"{who} was evicted: {message}", pod=pod_name(pod)
        )
    return None


def _pod_failed(pod: JSON, who: str) -> Failure | None:
    """A node pod that failed with no container to blame (the kubelet refused it: its reason)."""
    status = pod.get("status", {})
    if status.get("phase") != "Failed":
        return None
    reason = str(status.get("reason") or "Failed")
    message = str(status.get("message") or "").strip()
    detail = f"{reason}: {message}" if message else reason
    return Failure(FailureKind.WORKER_FAILED, f"{who} failed ({detail})", pod=pod_name(pod))


# -- the failing rank -------------------------------------------------------------------------


def rank_failure(
    failure: Failure,
    log: Sequence[str],
    pods: Mapping[str, JSON],
    ranks_per_node: int = 0,
    code_dir: str = "",
) -> Failure:
    """A node whose torchrun exited non-zero, said by the first failing rank in the nodes' ``log``
    (:func:`~ci_runner.backends.torchrun_failure.first_failure`, paths relative to ``code_dir``):
    ``node 1 (pod j-1-x7k2p): rank 1 raised ValueError: boom (train.py:10)``. The node named is
    the rank's (global rank // ``ranks_per_node``, torchrun's static rendezvous; 0: unknown, the
    failed node's), which a node whose ranks only failed because of it may have beaten to the
    end. Any other failure, or a log that shows no failed rank, stays as it is."""
    failed = pods.get(failure.pod or "")
    if failure.kind is not FailureKind.EXIT_CODE or failed is None or _not_started(failed):
        return failure
    found = first_failure(log, code_dir)
    if found is None:
        return failure
    pod = _node_of_rank(found.rank, ranks_per_node, failed, pods)
    message = f"{node(pod)}: {found.line()}{_memory_hint(found, pod)}"
    if pod is failed:
        return replace(failure, message=message)
    code = next((end.get("exitCode") for end in _ended(pod, failure.container)), None)
    return replace(failure, message=message, exit_code=code, pod=pod_name(pod))


def _not_started(pod: JSON) -> bool:
    """The node's torchrun never started (the runtime could not create its container)."""
    return any(end.get("reason") == START_ERROR for end in _ended(pod, None))


def _ended(pod: JSON, container: str | None) -> list[JSON]:
    """How the pod's (main) containers, or its ``container``, ended, if they did."""
    return [
        end
        for what, status in statuses(pod)
        if what != "init container" and (container is None or status.get("name") == container)
        if (end := status.get("state", {}).get("terminated"))
    ]


def _node_of_rank(rank: int, ranks_per_node: int, failed: JSON, pods: Mapping[str, JSON]) -> JSON:
    """The pod of the node that ran ``rank``: the ``failed`` one unless another has its index
    (the newest such, when a resume made new pods)."""
    index = rank // ranks_per_node if ranks_per_node > 0 else None
    if index is None or completion_index(failed) == index:
        return failed
    others = [pod for pod in pods.values() if completion_index(pod) == index]
    return max(others, key=_created, default=failed)


def _created(pod: JSON) -> str:
    return str(pod.get("metadata", {}).get("creationTimestamp") or "")


def _memory_hint(found: RankFailure, pod: JSON) -> str:
    """A rank SIGKILLed in a pod with a memory limit that the kubelet does not say OOMKilled:
    the kernel killed that rank alone (cgroup v1, or the kubelet's singleProcessOOMKill)."""
    limit = memory_limit(pod)
    if found.exitcode != -signal.SIGKILL or not limit:
        return ""
    return (
        f", most likely for going over the node's memory limit of {limit} (the kernel killed "
        f"that rank alone, not torchrun); fix: {MEMORY_FIX}"
    )
