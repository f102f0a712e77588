"""connect: KUBECONFIG (its context chosen as GitLab agent users do) or the in-cluster service
account; the namespace; one line when neither, or when the context is not clear."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.connect import Connection, connect_cluster, is_agent_context
from ci_runner.backends.kubernetes.errors import Forbidden, Unreachable
from ci_runner.backends.kubernetes.resources import MPIJOBS, SECRETS
from ci_runner.clock import ManualClock
from ci_runner.errors import ClusterError
from ci_runner.http_policy import KUBERNETES_RETRY
from ci_runner.settings import read_settings
from testing.agent_kubeconfig import CONTEXTS, JOB_TOKEN, gitlab_kubeconfig
from testing.fake_kube.server import FakeKubeServer
from testing.ports import free_port


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
    connection = connect_cluster(
        None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa"
    )
    assert connection.namespace == "team-ml"
    assert connection.source == str(path)
    config = connection.client.configuration
    assert config.host == "https://k8s.example.com:6443"
    assert config.api_key["BearerToken"].endswith("t0ken-value")


def test_train_yaml_namespace_wins(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "team-ml")
    assert (
        connect_cluster(
            "from-yaml", read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no"
        ).namespace
        == "from-yaml"
    )


def test_default_namespace(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path)
    assert (
        connect_cluster(
            None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no"
        ).namespace
        == "default"
    )


def test_in_cluster_service_account(tmp_path: Path) -> None:
    folder = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = connect_cluster(None, read_settings(env).kube, folder)
    assert connection.namespace == "ci-jobs"
    assert connection.source == "service account"
    assert connection.client.configuration.host == "https://10.0.0.1:443"
    assert connect_cluster("ml", read_settings(env).kube, folder).namespace == "ml"


def test_no_cluster_at_all(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught:
        connect_cluster(None, read_settings({}).kube, tmp_path / "no-sa")
    assert str(caught.value) == (
        "no Kubernetes cluster to run on: this CI job is not in a pod with a service account "
        "and KUBECONFIG is not set; fix: add a KUBECONFIG CI/CD variable of type File holding "
        "a kubeconfig, or run the job on a Kubernetes runner"
    )


def test_kubeconfig_that_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught:
        connect_cluster(
            None, read_settings({"KUBECONFIG": "apiVersion: v1"}).kube, tmp_path / "no-sa"
        )
    assert str(caught.value) == (
        "KUBECONFIG is 'apiVersion: v1' but no such file exists; fix: make KUBECONFIG a CI/CD "
        "variable of type File (GitLab then gives the job a path to it)"
    )


def test_kubeconfig_that_is_not_a_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("just: text\n")
    with pytest.raises(ClusterError) as caught:
        connect_cluster(None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa")
    message = str(caught.value)
    assert message.startswith(f"{path}: not a usable kubeconfig: ")
    assert message.endswith(
        "; fix: point KUBECONFIG at a valid kubeconfig file (kubectl config view --raw)"
    )
    assert "\n" not in message


def test_a_kubeconfig_that_is_not_yaml_is_named_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("users:\n- name: u\n  user: {token: s3cret-t0ken\n")
    with pytest.raises(ClusterError) as caught:
        connect_cluster(None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa")
    assert str(caught.value) == (
        f"{path}: not a usable kubeconfig: it is not valid YAML on line 4: expected ',' or '}}', "
        "but got '<stream end>'; fix: point KUBECONFIG at a valid kubeconfig file "
        "(kubectl config view --raw)"
    )


def test_a_service_account_kubeconfig_wins_over_the_pods_service_account(tmp_path: Path) -> None:
    # Like kubectl: KUBECONFIG, when set, is what the job was given to use.
    path = kubeconfig(tmp_path, "team-ml")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = connect_cluster(
        None, read_settings({**env, "KUBECONFIG": str(path)}).kube, service_account(tmp_path)
    )
    assert (connection.source, connection.namespace) == (str(path), "team-ml")


# The GitLab agent for Kubernetes: the KUBECONFIG it gives a job (testing/agent_kubeconfig.py).


def token_of(connection: Connection) -> str:
    return str(connection.client.configuration.api_key["BearerToken"]).removeprefix("Bearer ")


def test_several_agent_contexts_and_none_chosen_fail_at_once_listing_them(tmp_path: Path) -> None:
    path = gitlab_kubeconfig(tmp_path)
    with pytest.raises(ClusterError) as caught:
        connect_cluster(None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa")
    assert str(caught.value) == (
        f"the kubeconfig {path} has 3 contexts and none is current: {CONTEXTS}; fix: choose one "
        "with the CI/CD variable KUBE_CONTEXT, --kube-context or kubernetes.context in "
        "train.yaml, e.g. KUBE_CONTEXT=ml/k8s-agents:cpu-cluster"
    )


@pytest.mark.parametrize(
    ("flag", "variable", "configured", "agent_id", "namespace"),
    [
        (None, "ml/k8s-agents:gpu-cluster", None, 12, "ml-training"),
        (None, None, "ml/k8s-agents:cpu-cluster", 11, "default"),
        (None, "platform/shared/agents:sandbox", "ml/k8s-agents:cpu-cluster", 31, "sandbox"),
        ("ml/k8s-agents:cpu-cluster", "ml/k8s-agents:gpu-cluster", None, 11, "default"),
        (None, "", "ml/k8s-agents:gpu-cluster", 12, "ml-training"),  # empty: unset
    ],
)
def test_the_flag_then_kube_context_then_train_yaml_choose_the_context(
    tmp_path: Path,
    flag: str | None,
    variable: str | None,
    configured: str | None,
    agent_id: int,
    namespace: str,
) -> None:
    env = {"KUBECONFIG": str(gitlab_kubeconfig(tmp_path))}
    if variable is not None:
        env["KUBE_CONTEXT"] = variable
    connection = connect_cluster(
        None, read_settings(env).kube, tmp_path / "no-sa", context=configured, context_flag=flag
    )
    assert token_of(connection) == f"ci:{agent_id}:{JOB_TOKEN}"
    assert connection.namespace == namespace
    assert connection.client.configuration.host == "https://kas.gitlab.example.com/k8s-proxy"
    assert connection.client.agent_context == (flag or variable or configured)


def test_train_yaml_namespace_wins_over_the_agents_default_namespace(tmp_path: Path) -> None:
    env = {
        "KUBECONFIG": str(gitlab_kubeconfig(tmp_path)),
        "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster",
    }
    assert (
        connect_cluster("team-b", read_settings(env).kube, tmp_path / "no-sa").namespace == "team-b"
    )


def test_a_context_the_kubeconfig_lacks_is_named_with_where_it_came_from(tmp_path: Path) -> None:
    path = gitlab_kubeconfig(tmp_path)
    env = {"KUBECONFIG": str(path), "KUBE_CONTEXT": "ml/k8s-agents:tpu-cluster"}
    with pytest.raises(ClusterError) as caught:
        connect_cluster(None, read_settings(env).kube, tmp_path / "no-sa")
    assert str(caught.value) == (
        f"KUBE_CONTEXT chooses the context 'ml/k8s-agents:tpu-cluster', which the kubeconfig "
        f"{path} does not have (a GitLab agent's context is there only when the agent's "
        "ci_access lists this project or its group); fix: use one of its contexts: "
        f"{CONTEXTS}"
    )
    with pytest.raises(ClusterError) as caught:
        connect_cluster(
            None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa", context="prod"
        )
    assert str(caught.value) == (
        f"kubernetes.context in train.yaml chooses the context 'prod', which the kubeconfig "
        f"{path} does not have; fix: use one of its contexts: {CONTEXTS}"
    )


def test_a_chosen_context_without_a_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught:
        connect_cluster(
            None,
            read_settings({}).kube,
            service_account(tmp_path),
            context_flag="ml/k8s-agents:gpu-cluster",
        )
    assert str(caught.value) == (
        "--kube-context chooses the kubeconfig context 'ml/k8s-agents:gpu-cluster' but "
        "KUBECONFIG is not set; fix: authorize this project in the GitLab agent's ci_access "
        "(GitLab then gives every job a KUBECONFIG), or add a KUBECONFIG CI/CD variable of "
        "type File"
    )


def test_the_only_context_is_used_when_none_is_current(tmp_path: Path) -> None:
    path = tmp_path / "KUBECONFIG"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "gitlab", "cluster": {"server": "https://kas.example/k8s-proxy"}}
                ],
                "users": [{"name": "agent:5", "user": {"token": f"ci:5:{JOB_TOKEN}"}}],
                "contexts": [
                    {"name": "g/p:a", "context": {"cluster": "gitlab", "user": "agent:5"}}
                ],
            }
        )
    )
    connection = connect_cluster(
        None, read_settings({"KUBECONFIG": str(path)}).kube, tmp_path / "no-sa"
    )
    assert (token_of(connection), connection.namespace) == (f"ci:5:{JOB_TOKEN}", "default")
    assert connection.client.agent_context == "g/p:a"


def test_only_agent_shaped_context_names_count_as_the_agent() -> None:
    assert is_agent_context("ml/k8s-agents:gpu-cluster")
    assert is_agent_context("a/b/c:x")
    assert not is_agent_context("kind-kind")
    assert not is_agent_context("arn:aws:eks:eu-west-1:123456789012:cluster/ml")
    assert not is_agent_context("ml/k8s-agents:GPU")


@pytest.fixture
def kas() -> Iterator[FakeKubeServer]:
    """The fake API server behind the agent: it accepts only the gpu-cluster agent's token and
    sees requests as the CI job the agent impersonates."""
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as server:
        server.user = "gitlab:ci_job:1074499489"
        yield server


def test_requests_go_to_the_chosen_agents_cluster_with_its_token(
    tmp_path: Path, kas: FakeKubeServer
) -> None:
    env = {
        "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
        "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster",
    }
    connection = connect_cluster(None, read_settings(env).kube, tmp_path / "no-sa")
    api = KubeApi(
        connection.client,
        connection.namespace,
        ManualClock(),
        replace(KUBERNETES_RETRY, attempts=1),
    )
    api.create(SECRETS, {"metadata": {"name": "s"}})
    assert kas.store.get("secrets", "ml-training", "s")["metadata"]["name"] == "s"


def test_a_403_through_the_agent_names_the_context_and_ci_access(
    tmp_path: Path, kas: FakeKubeServer
) -> None:
    kas.forbid("create", "mpijobs")
    env = {
        "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
        "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster",
    }
    connection = connect_cluster(None, read_settings(env).kube, tmp_path / "no-sa")
    api = KubeApi(
        connection.client,
        connection.namespace,
        ManualClock(),
        replace(KUBERNETES_RETRY, attempts=1),
    )
    with pytest.raises(Forbidden) as caught:
        api.create(MPIJOBS, {"metadata": {"name": "j"}})
    assert str(caught.value) == (
        "Kubernetes refused to create mpijobs.kubeflow.org in namespace ml-training through the "
        "GitLab agent context ml/k8s-agents:gpu-cluster (403 Forbidden: mpijobs.kubeflow.org "
        'is forbidden: User "gitlab:ci_job:1074499489" cannot create resource "mpijobs" in API '
        'group "kubeflow.org" in the namespace "ml-training"); fix: the agent\'s ci_access must '
        "list this project (or its group) with access to namespace ml-training, and the "
        "identity it impersonates (access_as) needs the RBAC rule "
        '{apiGroups: ["kubeflow.org"], resources: ["mpijobs"], verbs: ["create"]} there '
        "(examples/rbac.yaml grants everything ci-runner needs)"
    )


def test_a_refused_connection_through_the_agent_says_it_may_not_be_connected(
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, url)),
        "KUBE_CONTEXT": "ml/k8s-agents:cpu-cluster",
    }
    connection = connect_cluster(None, read_settings(env).kube, tmp_path / "no-sa")
    api = KubeApi(
        connection.client,
        connection.namespace,
        ManualClock(),
        replace(KUBERNETES_RETRY, attempts=1),
    )
    with pytest.raises(Unreachable) as caught:
        api.create(SECRETS, {"metadata": {"name": "s"}})
    line = str(caught.value)
    assert line.startswith(
        "cannot reach the Kubernetes API through the GitLab agent context "
        f"ml/k8s-agents:cpu-cluster ({url}) to create secrets in namespace default: "
    )
    assert line.endswith(
        "; fix: the agent may not be connected: check that its pod runs in the cluster and that "
        "the agent shows as connected in its project (Operate > Kubernetes clusters)"
    )
    assert "Connection refused" in line and "\n" not in line
