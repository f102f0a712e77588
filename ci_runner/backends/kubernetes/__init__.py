"""The Kubernetes backend: run a rendered MPIJob on a cluster with MPI Operator v0.8.2.

``connect`` builds the client; ``submit``, ``watching``, ``tracker`` (the job's state
machine), ``launcher_log`` (the launcher's log, streamed), ``explain`` and ``cleanup`` do one job
each; :class:`~ci_runner.backends.kubernetes.backend.KubernetesBackend`
puts them together.
"""
