"""The cluster-wide rights of the control plane's own users, as upstream deploys them:

- MPI Operator v0.8.2: the rules of its ClusterRole ``mpi-operator`` (kubeflow/mpi-operator at
  v0.8.2, ``deploy/v2beta1/mpi-operator.yaml``, the same as ``manifests/base/cluster-role.yaml``),
  bound to the operator's user instead of upstream's ServiceAccount ``mpi-operator/mpi-operator``;
- kube-apiserver's client of the kubelets (``--kubelet-client-certificate``): the bootstrap
  ClusterRole ``system:kubelet-api-admin`` (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/
  policy.go``), which the kubelets' SubjectAccessReviews check for ``nodes/proxy``."""

from __future__ import annotations

from typing import Any

from testing.kube_api import Api, ApiFailure

JSON = dict[str, Any]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
OPERATOR_USER = "mpi-operator"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
KUBELET_API_ADMIN = "system:kubelet-api-admin"


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> JSON:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


# deploy/v2beta1/mpi-operator.yaml, ClusterRole mpi-operator: one entry per upstream rule, in order.
OPERATOR_RULES = (
    _rule([""], ["configmaps", "secrets", "services"], ["create", "list", "watch", "update"]),
    _rule([""], ["pods"], ["create", "get", "list", "watch", "delete", "update", "patch"]),
    _rule([""], ["pods/exec"], ["create"]),  # upstream: "needed for the launcher Role"
    _rule([""], ["endpoints"], ["create", "get", "update"]),
    _rule([""], ["events"], ["create", "patch"]),
    _rule(["batch"], ["jobs"], ["create", "list", "update", "watch"]),
    _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["create", "get"]),
    _rule(["kubeflow.org"], ["mpijobs", "mpijobs/finalizers", "mpijobs/status"], ["*"]),
    _rule(["coordination.k8s.io"], ["leases"], ["*"]),
    _rule(
        ["scheduling.incubator.k8s.io", "scheduling.sigs.dev", "scheduling.volcano.sh"],
        ["queues", "podgroups"],
        ["*"],
    ),
    _rule(["scheduling.x-k8s.io"], ["podgroups"], ["*"]),
    _rule(["scheduling.k8s.io"], ["priorityclasses"], ["get", "list", "watch"]),
)


def create_once(api: Api, path: str, obj: JSON) -> None:
    """Create ``obj`` under ``path``; one that exists already stays as it is."""
    try:
        api.create(path, obj)
    except ApiFailure as err:
        if err.code != 409:
            raise


def bind_cluster_role(api: Api, role: str, user: str) -> None:
    """A ClusterRoleBinding of ``role`` to the user ``user`` (named after both)."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{role}:{user}".replace("system:", "")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    create_once(api, f"{RBAC}/clusterrolebindings", binding)


def grant_operator(api: Api, user: str = OPERATOR_USER) -> None:
    """The ClusterRole ``mpi-operator`` with :data:`OPERATOR_RULES`, bound to ``user``."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "mpi-operator", "labels": {"app": "mpi-operator"}},
        "rules": list(OPERATOR_RULES),
    }
    create_once(api, f"{RBAC}/clusterroles", role)
    bind_cluster_role(api, "mpi-operator", user)


def grant_kubelet_client(api: Api, user: str = KUBELET_CLIENT_USER) -> None:
    """``system:kubelet-api-admin`` for kube-apiserver's (or a test's) client of the kubelets."""
    bind_cluster_role(api, KUBELET_API_ADMIN, user)
