"""ci-runner: Horovod distributed training on Kubernetes, driven from GitLab CI."""

__version__ = "0.1.0"
