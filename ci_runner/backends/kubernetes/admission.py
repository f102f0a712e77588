"""Why admission refused to create an object, and the fix: one rule for each kind of refusal,
with one wording, whoever was refused — ci-runner's own request (a 403:
:class:`~ci_runner.backends.kubernetes.errors.Forbidden`) or a pod the operator or the launcher
Job could not create (their Warning Events: :mod:`explain`).

The rules, the first that matches wins: a ResourceQuota some container does not declare for,
a ResourceQuota used up, PodSecurity (which names the level it enforces, so its fix is more
precise than any admission policy's), an admission webhook's denial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

# kube-apiserver's quota admission (apiserver/pkg/admission/plugin/resourcequota/controller.go):
# `exceeded quota: <name>, requested: ..., used: ..., limited: ...`.
QUOTA_EXCEEDED: Final = re.compile(r"exceeded quota: ")
# pkg/quota/v1/evaluator/core/pods.go Constraints: "must specify R for: c1,c2; R2 for: c3".
QUOTA_UNDECLARED: Final = re.compile(r"failed quota: [^:]+: must specify (?P<missing>[^\n]+)")
# k8s.io/pod-security-admission v0.35.4 admission/admission.go: a refused pod's
# `violates PodSecurity "<level>:<version>": ...`.
POD_SECURITY: Final = re.compile(r'violates PodSecurity "(?P<level>[a-z]+):[^"]*"')
ENFORCE_LABEL: Final = "pod-security.kubernetes.io/enforce"
# apiserver/pkg/admission/plugin/webhook/errors/statuserror.go: `admission webhook "<name>" denied
# the request: <message>` (or `... denied the request without explanation`).
WEBHOOK_DENIED: Final = re.compile(r'admission webhook "[^"]*" denied the request')
# Our containers and the train.yaml field that sets each one's cpu and memory.
CONTAINER_FIELDS: Final = {
    "worker": ("resources.cpu", "resources.memory"),
    "fetch-code": ("resources.setup",),
    "install-requirements": ("resources.setup",),
    "launcher": ("resources.launcher",),
    "torchrun": ("resources.cpu", "resources.memory"),  # distributed: torchrun's node
}
FIELD_ORDER: Final = ("resources.cpu", "resources.memory", "resources.setup", "resources.launcher")


def refusal_fix(message: str, namespace: str) -> str:
    """The fix for admission's refusal ``message`` in ``namespace`` (what follows "fix: "); ""
    when no rule knows it."""
    return (
        quota_undeclared_fix(message)
        or quota_exceeded_fix(message, namespace)
        or pod_security_fix(message, namespace)
        or webhook_fix(message)
    )


def node_refusal_fix(message: str, namespace: str) -> str:
    """:func:`refusal_fix` for a pod of the Indexed Job (``distributed: torchrun``), which meets
    PodSecurity restricted as rendered: no sshd, every container non-root."""
    return (
        quota_undeclared_fix(message)
        or quota_exceeded_fix(message, namespace)
        or node_pod_security_fix(message, namespace)
        or webhook_fix(message)
    )


def node_pod_security_fix(message: str, namespace: str) -> str:
    """PodSecurity admission refused a torchrun node's pod; "" for another refusal."""
    found = POD_SECURITY.search(message)
    if found is None:
        return ""
    return (
        f"namespace {namespace} enforces PodSecurity {found['level']} (label {ENFORCE_LABEL}); "
        "ci-runner's torchrun pods meet restricted: what the message names was added to them by "
        "the cluster (a mutating admission webhook), ask its administrators"
    )


def quota_undeclared_fix(message: str) -> str:
    """A ResourceQuota refused a pod whose containers do not all declare the cpu/memory it
    counts: what to set for each; "" for another refusal."""
    found = QUOTA_UNDECLARED.search(message)
    if found is None:
        return ""
    containers: list[str] = []
    for part in found["missing"].split("; "):
        for name in part.partition(" for: ")[2].split(","):
            if name and name not in containers:
                containers.append(name)
    wanted = {field for name in containers for field in CONTAINER_FIELDS.get(name, ())}
    fields = [field for field in FIELD_ORDER if field in wanted]
    steps = [f"set {listed(fields)} in train.yaml"] if fields else []
    others = [name for name in containers if name not in CONTAINER_FIELDS]
    if others:
        steps.append(
            f"ask the cluster's administrators for a LimitRange with defaults, or for requests "
            f"and limits on the containers an admission webhook adds ({', '.join(others)})"
        )
    return (
        "the namespace's ResourceQuota counts cpu and memory, so every container must declare "
        f"them: {'; '.join(steps)}"
    )


def quota_exceeded_fix(message: str, namespace: str) -> str:
    """A ResourceQuota has no room left for what was asked; "" for another refusal."""
    if QUOTA_EXCEEDED.search(message) is None:
        return ""
    return (
        f"a ResourceQuota in namespace {namespace} is used up: wait for other jobs to finish, "
        "ask for less (workers, resources), or have the quota raised"
    )


def pod_security_fix(message: str, namespace: str) -> str:
    """PodSecurity admission refused a pod: the level the namespace enforces and what meets it;
    "" for another refusal."""
    found = POD_SECURITY.search(message)
    if found is None:
        return ""
    level = found["level"]
    enforced = f"namespace {namespace} enforces PodSecurity {level} (label {ENFORCE_LABEL})"
    if level == "restricted":
        return (
            f"{enforced}, which a worker meets only as a non-root user: set kubernetes.run_as_user "
            "to the image's non-root uid and kubernetes.ssh_port to 1024 or more, or have the "
            f"namespace labelled {ENFORCE_LABEL}=baseline"
        )
    return (
        f"{enforced}; ci-runner's pods meet baseline (and restricted with kubernetes.run_as_user): "
        "what the message names was added to them by the cluster (a mutating admission webhook), "
        "ask its administrators"
    )


def webhook_fix(message: str) -> str:
    """An admission webhook denied the request; "" for another refusal."""
    if WEBHOOK_DENIED.search(message) is None:
        return ""
    return (
        "an admission policy of the cluster refused it: change what the message names, or ask "
        "the cluster's administrators about the policy"
    )


def listed(words: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c" (:mod:`explain` words its lists so too)."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
