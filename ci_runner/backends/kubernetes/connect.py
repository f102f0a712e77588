"""Build the API client: a kubeconfig context when ``KUBECONFIG`` is set, else the pod's service
account.

The context is ``--kube-context``, else the ``KUBE_CONTEXT`` variable, else train.yaml's
``kubernetes.context``, else the kubeconfig's current context, else its only context. The
namespace is train.yaml's ``kubernetes.namespace``, else the context's, else the service
account's, else ``default``.

The GitLab agent for Kubernetes is the usual way in: GitLab gives every job of a project the
agent authorizes (``ci_access``) a ``KUBECONFIG`` with one cluster ``gitlab`` (the agent server's
Kubernetes proxy), one user ``agent:<agent id>`` with the token ``ci:<agent id>:<job token>``, and
one context ``<agent configuration project path>:<agent name>`` per agent, its ``namespace`` the
``default_namespace`` of ``ci_access``; it sets no current context
(gitlabhq app/services/ci/generate_kubeconfig_service.rb:12-29,43-57;
lib/gitlab/kubernetes/kubeconfig/template.rb:35-43, no ``current-context``;
lib/gitlab/kubernetes/kubeconfig/entry/context.rb:9,27-31). Jobs pick one with
``kubectl config use-context``, and Auto DevOps and shared templates with the ``KUBE_CONTEXT``
variable (https://docs.gitlab.com/user/clusters/agent/ci_cd_workflow/ ;
https://docs.gitlab.com/topics/autodevops/cloud_deployments/auto_devops_with_gke/ : "a key called
KUBE_CONTEXT with a value like path/to/agent/project:gke-agent").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import load_kube_config

from ci_runner import variables
from ci_runner.errors import ClusterError
from ci_runner.settings import KubeSettings

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONTEXT_VARIABLE: Final = variables.KUBE_CONTEXT
CONTEXT_FLAG: Final = "--kube-context"
_FROM_TRAIN_YAML: Final = "kubernetes.context in train.yaml"
_HOW_TO_CHOOSE: Final = (
    f"choose one with the CI/CD variable {CONTEXT_VARIABLE}, {CONTEXT_FLAG} or "
    "kubernetes.context in train.yaml"
)
# "<agent configuration project path>:<agent name>": a project path has a group, agent names are
# lowercase letters, digits and '-'.
_AGENT_CONTEXT: Final = re.compile(r"[^\s:/]+(/[^\s:/]+)+:[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_agent_context(name: str) -> bool:
    """Whether a kubeconfig context is one GitLab made for an agent for Kubernetes."""
    return _AGENT_CONTEXT.fullmatch(name) is not None


class ClusterClient(ApiClient):
    """An API client that knows the GitLab agent context it goes through ("" for none), so that
    a refusal can be explained in the agent's terms."""

    def __init__(self, configuration: Configuration, agent_context: str = "") -> None:
        super().__init__(configuration)
        self.agent_context = agent_context


@dataclass(frozen=True)
class Connection:
    client: ClusterClient
    namespace: str
    source: str  # "service account" or the kubeconfig path, for messages


@dataclass(frozen=True)
class _Choice:
    name: str
    origin: str  # where the name came from, for messages


def connect_cluster(
    namespace: str | None,
    kube: KubeSettings,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    *,
    context: str | None = None,
    context_flag: str | None = None,
) -> Connection:
    """A client for the cluster this CI job should use; :class:`ClusterError` if there is none.

    ``namespace`` and ``context`` are train.yaml's ``kubernetes.namespace`` and
    ``kubernetes.context``; ``context_flag`` is ``--kube-context``.
    """
    choice = _choose(context_flag, kube, context)
    kubeconfig = _kubeconfig_path(kube)
    if kubeconfig is not None:
        return _from_kubeconfig(kubeconfig, choice, namespace)
    if choice is not None:
        raise ClusterError(
            f"{choice.origin} chooses the kubeconfig context {choice.name!r} but KUBECONFIG is "
            "not set; fix: authorize this project in the GitLab agent's ci_access (GitLab then "
            "gives every job a KUBECONFIG), or add a KUBECONFIG CI/CD variable of type File"
        )
    token = service_account_dir / "token"
    if kube.service_host and token.is_file():
        return _in_cluster(service_account_dir, kube, namespace)
    raise ClusterError(
        "no Kubernetes cluster to run on: this CI job is not in a pod with a service account "
        "and KUBECONFIG is not set; fix: add a KUBECONFIG CI/CD variable of type File "
        "holding a kubeconfig, or run the job on a Kubernetes runner"
    )


def _choose(flag: str | None, kube: KubeSettings, configured: str | None) -> _Choice | None:
    if flag:
        return _Choice(flag, CONTEXT_FLAG)
    variable = kube.context
    if variable.strip():  # an empty variable changes nothing, like CI_RUNNER_WORKERS
        return _Choice(variable, CONTEXT_VARIABLE)
    if configured:
        return _Choice(configured, _FROM_TRAIN_YAML)
    return None


def _service_address(kube: KubeSettings) -> dict[str, str]:
    """The service's address as the in-cluster configuration reads it: the pod's variables."""
    address = {
        variables.KUBERNETES_SERVICE_HOST: kube.service_host,
        variables.KUBERNETES_SERVICE_PORT: kube.service_port,
    }
    return {name: value for name, value in address.items() if value is not None}


def _in_cluster(folder: Path, kube: KubeSettings, namespace: str | None) -> Connection:
    configuration = Configuration()
    try:
        loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(folder / "token"),
            cert_filename=str(folder / "ca.crt"),
            environ=_service_address(kube),
        )
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise ClusterError(
            f"cannot use the pod's service account in {folder}: {exc}; "
            "fix: mount a service account token into the CI job's pod, or set KUBECONFIG"
        ) from None
    own = _read(folder / "namespace")
    return Connection(
        ClusterClient(configuration), namespace or own or "default", "service account"
    )


def _from_kubeconfig(path: Path, choice: _Choice | None, namespace: str | None) -> Connection:
    contexts, current = _contexts(path)
    names = ", ".join(contexts)
    if choice is not None and choice.name not in contexts:
        agent = (
            " (a GitLab agent's context is there only when the agent's ci_access lists this "
            "project or its group)"
            if is_agent_context(choice.name)
            else ""
        )
        raise ClusterError(
            f"{choice.origin} chooses the context {choice.name!r}, which the kubeconfig {path} "
            f"does not have{agent}; fix: use one of its contexts: {names}"
        )
    if choice is not None:
        name = choice.name
    elif current:
        name = current
    elif len(contexts) == 1:
        name = next(iter(contexts))
    else:
        raise ClusterError(
            f"the kubeconfig {path} has {len(contexts)} contexts and none is current: {names}; "
            f"fix: {_HOW_TO_CHOOSE}, e.g. {CONTEXT_VARIABLE}={next(iter(contexts))}"
        )
    configuration = Configuration()
    try:
        load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path), context=name, client_configuration=configuration
        )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        _unusable(path, exc)
    own = contexts.get(name) or ""
    agent = name if is_agent_context(name) else ""
    return Connection(ClusterClient(configuration, agent), namespace or own or "default", str(path))


def _contexts(path: Path) -> tuple[dict[str, str], str]:
    """The kubeconfig's contexts (name → namespace, "" for none) and its current context."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        _unusable(path, exc)
    except yaml.YAMLError as exc:
        # Not str(exc): it quotes the offending line, which may hold a token.
        mark = getattr(exc, "problem_mark", None)
        where = f" on line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "a syntax error"
        _unusable(path, ValueError(f"it is not valid YAML{where}: {problem}"))
    if not isinstance(document, dict) or not isinstance(document.get("contexts") or [], list):
        _unusable(path, ValueError("it is not a mapping with a list of contexts"))
    contexts: dict[str, str] = {}
    for entry in document.get("contexts") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            _unusable(path, ValueError("a context without a name"))
        context = entry.get("context")
        namespace = context.get("namespace") if isinstance(context, dict) else None
        contexts[entry["name"]] = namespace if isinstance(namespace, str) else ""
    if not contexts:
        _unusable(path, ValueError("it has no contexts"))
    current = document.get("current-context")
    return contexts, current if isinstance(current, str) else ""


def _unusable(path: Path, exc: BaseException) -> NoReturn:
    reason = " ".join(str(exc).split())
    raise ClusterError(
        f"{path}: not a usable kubeconfig: {reason}; "
        "fix: point KUBECONFIG at a valid kubeconfig file (kubectl config view --raw)"
    ) from None


def _kubeconfig_path(kube: KubeSettings) -> Path | None:
    value = kube.kubeconfig
    # Like kubectl: a list of paths; we take the first that exists.
    for part in value.split(os.pathsep):
        if part and Path(part).is_file():
            return Path(part)
    if value:
        raise ClusterError(
            f"KUBECONFIG is {value!r} but no such file exists; fix: make KUBECONFIG a CI/CD "
            "variable of type File (GitLab then gives the job a path to it)"
        )
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
