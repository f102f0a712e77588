"""The Kubernetes backend: run a rendered MPIJob on a cluster with MPI Operator v0.8.2.

``connect`` builds the client; ``submit``, ``watching``, ``follow``, ``logs``, ``explain`` and
``cancel`` do one job each; :class:`KubernetesBackend` puts them together.
"""

from ci_runner.kube.backend import KubernetesBackend
from ci_runner.kube.cancel import cancel_on_cluster
from ci_runner.kube.connect import Connection, connect
from ci_runner.kube.permissions import REQUIRED_PERMISSIONS

__all__ = [
    "REQUIRED_PERMISSIONS",
    "Connection",
    "KubernetesBackend",
    "cancel_on_cluster",
    "connect",
]
