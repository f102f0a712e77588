"""Build the API client: the pod's service account when in a cluster, else ``KUBECONFIG``.

The namespace is train.yaml's when set, else the service account's, else the kubeconfig
context's, else ``default``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import list_kube_config_contexts, load_kube_config

from ci_runner.errors import ClusterError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Connection:
    client: ApiClient
    namespace: str
    source: str  # "service account" or the kubeconfig path, for messages


def connect(
    namespace: str | None,
    env: Mapping[str, str],
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> Connection:
    """A client for the cluster this CI job should use; :class:`ClusterError` if there is none."""
    configuration = Configuration()
    token = service_account_dir / "token"
    if env.get("KUBERNETES_SERVICE_HOST") and token.is_file():
        try:
            loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(token),
                cert_filename=str(service_account_dir / "ca.crt"),
                environ=env,
            )
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise ClusterError(
                f"cannot use the pod's service account in {service_account_dir}: {exc}; "
                "fix: mount a service account token into the CI job's pod, or set KUBECONFIG"
            ) from exc
        own = _read(service_account_dir / "namespace")
        return Connection(
            ApiClient(configuration), namespace or own or "default", "service account"
        )
    kubeconfig = _kubeconfig_path(env)
    if kubeconfig is None:
        raise ClusterError(
            "no Kubernetes cluster to run on: this CI job is not in a pod with a service account "
            "and KUBECONFIG is not set; fix: add a KUBECONFIG CI/CD variable of type File "
            "holding a kubeconfig, or run the job on a Kubernetes runner"
        )
    try:
        load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        _, context = list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig)
        )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())
        raise ClusterError(
            f"{kubeconfig}: not a usable kubeconfig: {reason}; "
            "fix: point KUBECONFIG at a valid kubeconfig file (kubectl config view --raw)"
        ) from exc
    own = str((context or {}).get("context", {}).get("namespace") or "")
    return Connection(ApiClient(configuration), namespace or own or "default", str(kubeconfig))


def _kubeconfig_path(env: Mapping[str, str]) -> Path | None:
    value = env.get("KUBECONFIG", "")
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
