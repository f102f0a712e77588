"""Every API verb ci-runner's Kubernetes backend uses: the RBAC Role it needs, no more."""

from __future__ import annotations

from typing import Final

# (apiGroup, resource, verbs). tests/test_backends_kubernetes_permissions.py checks that the fake
# API server saw no request outside this list, so it stays exact.
REQUIRED_PERMISSIONS: Final[tuple[tuple[str, str, tuple[str, ...]], ...]] = (
    ("kubeflow.org", "mpijobs", ("create", "get", "list", "watch", "patch", "delete")),
    # distributed: torchrun's Indexed Job and its headless Service (owned by the Job, so the
    # garbage collector deletes it; patched when an earlier run of the CI job left one).
    ("batch", "jobs", ("create", "get", "list", "watch", "patch", "delete")),
    ("", "services", ("create", "patch")),
    ("", "secrets", ("create", "patch", "delete")),
    ("", "configmaps", ("create", "patch")),
    ("", "pods", ("get", "list", "watch", "deletecollection")),
    ("", "pods/log", ("get",)),
    ("", "events", ("list", "watch")),
    # kubernetes.local_queue: Kueue's LocalQueue checked before submission, the job's Workload
    # followed (without them ci-runner says once that it cannot see the queue, and goes on).
    ("kueue.x-k8s.io", "localqueues", ("get",)),
    ("kueue.x-k8s.io", "workloads", ("list", "watch")),
    # Where the job waits in its LocalQueue (Kueue's visibility API; optional as well).
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", ("get",)),
)


def rbac_rule(group: str, resource: str, verb: str) -> str:
    """An RBAC rule granting one verb, as it would appear in a Role."""
    return f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'
