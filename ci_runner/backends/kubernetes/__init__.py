"""The Kubernetes backend: run a rendered MPIJob on a cluster with MPI Operator v0.8.2.

``connect`` builds the client; ``submit``, ``reconnecting`` (the stream watches and logs share),
``watching``, ``events`` (which Events are the job's), ``tracker`` (the job's state machine,
with ``jobstate``, ``timeouts``, ``ending`` and ``status_lines``; ``jobkind`` is what it asks of
a kind of job, ``mpijob`` the MPIJob's answers), ``launcher_log`` (the launcher's log,
streamed), ``podstatus``, ``explain`` (failure texts), ``cleanup`` and ``supervision`` (the
threads) do one job each;
:class:`~ci_runner.backends.kubernetes.backend.KubernetesBackend`, built from one
:class:`~ci_runner.backends.kubernetes.options.JobOptions`, runs the job's lifecycle with them.
"""
