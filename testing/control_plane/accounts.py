"""Users of the real control plane that ci-runner runs as: the namespace, the ServiceAccount,
Role and RoleBinding of ``examples/rbac.yaml`` there, a token for that account from the
TokenRequest API, and a kubeconfig that carries it (the CA inline, so it stands alone)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from testing.kube_api import Api, ApiFailure
from testing.paths import REPO_ROOT
from testing.waiting import wait_for

JSON = dict[str, Any]
RBAC = REPO_ROOT / "examples" / "rbac.yaml"
ACCOUNT = "ci-runner"  # the ServiceAccount examples/rbac.yaml binds
PLURALS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def kubeconfig(url: str, ca: Path, token: str, namespace: str) -> JSON:
    """A kubeconfig for ``token`` on ``url``, the CA's PEM inline."""
    ca_data = base64.b64encode(ca.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emulated", "cluster": {"server": url, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": "emulated", "user": {"token": token}}],
        "contexts": [
            {
                "name": "emulated",
                "context": {"cluster": "emulated", "user": "emulated", "namespace": namespace},
            }
        ],
        "current-context": "emulated",
    }


def create_namespace(
    api: Api, namespace: str, wait_for_account: bool = True, timeout: float = 30.0
) -> None:
    """The namespace (if missing), with ``wait_for_account`` once its ``default``
    ServiceAccount exists (the ServiceAccount admission plugin refuses pods before:
    ``serviceaccount "default" not found``)."""
    try:
        api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    except ApiFailure as err:
        if err.code != 409:
            raise
    if wait_for_account:
        account = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_for(f'ServiceAccount "default" in {namespace}', lambda: api.get(account), timeout)


def apply_rbac(api: Api, namespace: str) -> None:
    """examples/rbac.yaml, its objects moved to ``namespace`` (as ``kubectl -n`` does); what
    exists already stays."""
    for document in yaml.safe_load_all(RBAC.read_text()):
        document["metadata"]["namespace"] = namespace
        for subject in document.get("subjects") or []:
            subject["namespace"] = namespace
        try:
            api.create(PLURALS[document["kind"]].format(ns=namespace), document)
        except ApiFailure as err:
            if err.code != 409:
                raise


def account_token(api: Api, namespace: str, seconds: int = 3600) -> str:
    """A token for the examples/rbac.yaml ServiceAccount (``kubectl create token``)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    answer = api.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}/token", request)
    assert answer is not None, f"no ServiceAccount {ACCOUNT} in {namespace}"
    return str(answer["status"]["token"])


def ci_runner_kubeconfig(api: Api, url: str, ca: Path, namespace: str) -> JSON:
    """The namespace with examples/rbac.yaml applied and a kubeconfig with only that Role."""
    create_namespace(api, namespace)
    apply_rbac(api, namespace)
    return kubeconfig(url, ca, account_token(api, namespace), namespace)
