"""Every training run as one MLflow run: on the server MLFLOW_TRACKING_URI names, or in the
GitLab project's model experiments (``tracking: gitlab``)."""
