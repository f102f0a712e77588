"""Backends run a planned job (on Kubernetes, or on this machine) and return a
:class:`~ci_runner.backends.result.RunResult`; the training log leaves them only through a
:class:`~ci_runner.backends.logsink.LogSink`."""
