"""The Kubernetes backend: run a rendered MPIJob on a cluster with MPI Operator v0.8.2.

``connect`` builds the client; ``submit``, ``watching``, ``follow``, ``logs``, ``explain`` and
``cancel`` do one job each; :class:`~ci_runner.backends.kubernetes.backend.KubernetesBackend`
puts them together.
"""
