"""examples/rbac.yaml grants exactly what the Kubernetes backend calls, in one namespace."""

from __future__ import annotations

from pathlib import Path

import yaml

from ci_runner.backends.kubernetes.permissions import REQUIRED_PERMISSIONS

RBAC = Path(__file__).resolve().parent.parent / "examples" / "rbac.yaml"


def test_role_grants_exactly_the_required_permissions() -> None:
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    assert [d["kind"] for d in documents] == ["ServiceAccount", "Role", "RoleBinding"]
    role = documents[1]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    required = {
        (group, resource, verb) for group, resource, verbs in REQUIRED_PERMISSIONS for verb in verbs
    }
    assert granted == required


def test_binding_ties_the_service_account_to_the_role_in_one_namespace() -> None:
    account, role, binding = yaml.safe_load_all(RBAC.read_text())
    namespace = account["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
