"""connect: in-cluster service account or KUBECONFIG; the namespace; one line when neither."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ci_runner.backends.kubernetes.connect import connect
from ci_runner.errors import ClusterError


def kubeconfig(tmp_path: Path, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example.com:6443"}}],
                "users": [{"name": "u", "user": {"token": "t0ken-value"}}],
                "contexts": [{"name": "ctx", "context": context}],
                "current-context": "ctx",
            }
        )
    )
    return path


def service_account(tmp_path: Path, namespace: str = "ci-jobs") -> Path:
    folder = tmp_path / "sa"
    folder.mkdir()
    (folder / "token").write_text("sa-token")
    (folder / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (folder / "namespace").write_text(namespace + "\n")
    return folder


def test_kubeconfig_with_the_contexts_namespace(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "team-ml")
    connection = connect(None, {"KUBECONFIG": str(path)}, tmp_path / "no-sa")
    assert connection.namespace == "team-ml"
    assert connection.source == str(path)
    config = connection.client.configuration
    assert config.host == "https://k8s.example.com:6443"
    assert config.api_key["BearerToken"].endswith("t0ken-value")


def test_train_yaml_namespace_wins(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "team-ml")
    assert connect("from-yaml", {"KUBECONFIG": str(path)}, tmp_path / "no").namespace == "from-yaml"


def test_default_namespace(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path)
    assert connect(None, {"KUBECONFIG": str(path)}, tmp_path / "no").namespace == "default"


def test_in_cluster_service_account(tmp_path: Path) -> None:
    folder = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = connect(None, env, folder)
    assert connection.namespace == "ci-jobs"
    assert connection.source == "service account"
    assert connection.client.configuration.host == "https://10.0.0.1:443"
    assert connect("ml", env, folder).namespace == "ml"


def test_no_cluster_at_all(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught:
        connect(None, {}, tmp_path / "no-sa")
    assert str(caught.value) == (
        "no Kubernetes cluster to run on: this CI job is not in a pod with a service account "
        "and KUBECONFIG is not set; fix: add a KUBECONFIG CI/CD variable of type File holding "
        "a kubeconfig, or run the job on a Kubernetes runner"
    )


def test_kubeconfig_that_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught:
        connect(None, {"KUBECONFIG": "apiVersion: v1"}, tmp_path / "no-sa")
    assert str(caught.value) == (
        "KUBECONFIG is 'apiVersion: v1' but no such file exists; fix: make KUBECONFIG a CI/CD "
        "variable of type File (GitLab then gives the job a path to it)"
    )


def test_kubeconfig_that_is_not_a_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("just: text\n")
    with pytest.raises(ClusterError) as caught:
        connect(None, {"KUBECONFIG": str(path)}, tmp_path / "no-sa")
    message = str(caught.value)
    assert message.startswith(f"{path}: not a usable kubeconfig: ")
    assert message.endswith(
        "; fix: point KUBECONFIG at a valid kubeconfig file (kubectl config view --raw)"
    )
    assert "\n" not in message
