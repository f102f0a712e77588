"""Every environment variable ci-runner reads or sets, by name: the one place each name is written.

ci-runner reads its environment once, at the edge (:mod:`ci_runner.settings`, and
:mod:`ci_runner.context` and :mod:`ci_runner.policy` for the CI context and the project's policy);
deeper code gets typed values, and names a variable (in a message, or one it sets for the pods and
ranks) with a constant from here. ``tests/test_layout.py`` keeps every other module free of these
names as literals.
"""

from __future__ import annotations

from typing import Final

# -- GitLab's predefined CI variables -------------------------------------------------------------

GITLAB_CI: Final = "GITLAB_CI"
CI_COMMIT_SHA: Final = "CI_COMMIT_SHA"
CI_COMMIT_REF_NAME: Final = "CI_COMMIT_REF_NAME"
CI_COMMIT_REF_PROTECTED: Final = "CI_COMMIT_REF_PROTECTED"  # "true" for a protected branch or tag
CI_PROJECT_PATH: Final = "CI_PROJECT_PATH"
CI_PROJECT_ID: Final = "CI_PROJECT_ID"
CI_PROJECT_URL: Final = "CI_PROJECT_URL"
CI_REPOSITORY_URL: Final = "CI_REPOSITORY_URL"  # embeds the job token
CI_SERVER_URL: Final = "CI_SERVER_URL"
CI_API_V4_URL: Final = "CI_API_V4_URL"
CI_PIPELINE_ID: Final = "CI_PIPELINE_ID"
CI_PIPELINE_SOURCE: Final = "CI_PIPELINE_SOURCE"
CI_JOB_ID: Final = "CI_JOB_ID"
CI_JOB_URL: Final = "CI_JOB_URL"
CI_JOB_NAME: Final = "CI_JOB_NAME"
CI_JOB_IMAGE: Final = "CI_JOB_IMAGE"
CI_JOB_STATUS: Final = "CI_JOB_STATUS"  # in after_script: ``canceled``, ``timedout``...
CI_JOB_TIMEOUT: Final = "CI_JOB_TIMEOUT"  # GitLab 15.7+: the job's timeout in seconds
CI_JOB_STARTED_AT: Final = "CI_JOB_STARTED_AT"  # ISO 8601, UTC
RUNNER_SCRIPT_TIMEOUT: Final = "RUNNER_SCRIPT_TIMEOUT"  # GitLab Runner's, a Go duration
CI_DEFAULT_BRANCH: Final = "CI_DEFAULT_BRANCH"
CI_MERGE_REQUEST_IID: Final = "CI_MERGE_REQUEST_IID"
CI_MERGE_REQUEST_TARGET_BRANCH_NAME: Final = "CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
CI_MERGE_REQUEST_PROJECT_ID: Final = "CI_MERGE_REQUEST_PROJECT_ID"
CI_MERGE_REQUEST_SOURCE_PROJECT_ID: Final = "CI_MERGE_REQUEST_SOURCE_PROJECT_ID"
CI_MERGE_REQUEST_PROJECT_PATH: Final = "CI_MERGE_REQUEST_PROJECT_PATH"
CI_MERGE_REQUEST_SOURCE_PROJECT_PATH: Final = "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH"
CI_OPEN_MERGE_REQUESTS: Final = "CI_OPEN_MERGE_REQUESTS"

# GitLab's credentials in the CI job's environment.
CI_JOB_TOKEN: Final = "CI_JOB_TOKEN"
CI_REGISTRY_PASSWORD: Final = "CI_REGISTRY_PASSWORD"
CI_DEPENDENCY_PROXY_PASSWORD: Final = "CI_DEPENDENCY_PROXY_PASSWORD"
CI_DEPLOY_PASSWORD: Final = "CI_DEPLOY_PASSWORD"
CI_JOB_JWT: Final = "CI_JOB_JWT"  # the ID tokens of old
CI_JOB_JWT_V1: Final = "CI_JOB_JWT_V1"
CI_JOB_JWT_V2: Final = "CI_JOB_JWT_V2"
GITLAB_TOKEN: Final = "GITLAB_TOKEN"  # the name other GitLab tools read

# -- ci-runner's own: the component's inputs and the project's CI/CD variables --------------------

CI_RUNNER_GITLAB_TOKEN: Final = "CI_RUNNER_GITLAB_TOKEN"
CI_RUNNER_GIT_TOKEN: Final = "CI_RUNNER_GIT_TOKEN"
CI_RUNNER_GIT_USERNAME: Final = "CI_RUNNER_GIT_USERNAME"
CI_RUNNER_MLFLOW_TOKEN: Final = "CI_RUNNER_MLFLOW_TOKEN"  # the ranks' own MLflow token
CI_RUNNER_SETUP_IMAGE: Final = "CI_RUNNER_SETUP_IMAGE"
CI_RUNNER_ALLOWED_SECRETS: Final = "CI_RUNNER_ALLOWED_SECRETS"
CI_RUNNER_ALLOWED_OUTPUTS: Final = "CI_RUNNER_ALLOWED_OUTPUTS"
CI_RUNNER_ALLOWED_PIP_CACHE_CLAIMS: Final = "CI_RUNNER_ALLOWED_PIP_CACHE_CLAIMS"
CI_RUNNER_ALLOWED_LOCAL_QUEUES: Final = "CI_RUNNER_ALLOWED_LOCAL_QUEUES"
CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES: Final = "CI_RUNNER_ALLOWED_WORKLOAD_PRIORITY_CLASSES"
CI_RUNNER_ALLOW_GIT_PROTOCOL: Final = "CI_RUNNER_ALLOW_GIT_PROTOCOL"
CI_RUNNER_ALLOW_FORKS: Final = "CI_RUNNER_ALLOW_FORKS"
CI_RUNNER_NOTIFY_RESULT: Final = "CI_RUNNER_NOTIFY_RESULT"
CI_RUNNER_GITLAB_TIMEOUT: Final = "CI_RUNNER_GITLAB_TIMEOUT"
CI_RUNNER_TRACKING_TIMEOUT: Final = "CI_RUNNER_TRACKING_TIMEOUT"
CI_RUNNER_WORKERS: Final = "CI_RUNNER_WORKERS"  # a manual run's pipeline variables
CI_RUNNER_ARGS: Final = "CI_RUNNER_ARGS"
CI_RUNNER_CACHE: Final = "CI_RUNNER_CACHE"
# Every name ci-runner reads or sets starts so; train.yaml's env and secrets may not.
CI_RUNNER_PREFIX: Final = "CI_RUNNER_"

# -- What ci-runner sets: every rank, and the setup containers ------------------------------------

CI_RUNNER_SHA: Final = "CI_RUNNER_SHA"
CI_RUNNER_JOB: Final = "CI_RUNNER_JOB"
CI_RUNNER_PROJECT: Final = "CI_RUNNER_PROJECT"
CI_RUNNER_CODE_DIR: Final = "CI_RUNNER_CODE_DIR"
CI_RUNNER_REPO_URL: Final = "CI_RUNNER_REPO_URL"
CI_RUNNER_GIT_CREDENTIALS: Final = "CI_RUNNER_GIT_CREDENTIALS"
CI_RUNNER_REQUIREMENTS: Final = "CI_RUNNER_REQUIREMENTS"
CI_RUNNER_VENV_CACHE: Final = "CI_RUNNER_VENV_CACHE"
# torchrun's pods (distributed: torchrun): their namespace, from the downward API (torchrun.sh
# names node 0 with it); the Indexed Job's controller sets the node's index.
POD_NAMESPACE: Final = "POD_NAMESPACE"
JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"

# -- MLflow's own (read by ci-runner, and given to the ranks with tracking.ranks_log) -------------

MLFLOW_TRACKING_URI: Final = "MLFLOW_TRACKING_URI"
MLFLOW_RUN_ID: Final = "MLFLOW_RUN_ID"
MLFLOW_EXPERIMENT_ID: Final = "MLFLOW_EXPERIMENT_ID"
MLFLOW_TRACKING_INSECURE_TLS: Final = "MLFLOW_TRACKING_INSECURE_TLS"
MLFLOW_TRACKING_TOKEN: Final = "MLFLOW_TRACKING_TOKEN"
MLFLOW_TRACKING_USERNAME: Final = "MLFLOW_TRACKING_USERNAME"
MLFLOW_TRACKING_PASSWORD: Final = "MLFLOW_TRACKING_PASSWORD"
MLFLOW_PREFIX: Final = "MLFLOW_"

# -- AWS's standard variables: S3 (the outputs' links) ---------------------------------------------

AWS_ACCESS_KEY_ID: Final = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY: Final = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN: Final = "AWS_SESSION_TOKEN"
AWS_REGION: Final = "AWS_REGION"
AWS_DEFAULT_REGION: Final = "AWS_DEFAULT_REGION"
AWS_ENDPOINT_URL_S3: Final = "AWS_ENDPOINT_URL_S3"
AWS_ENDPOINT_URL: Final = "AWS_ENDPOINT_URL"

# -- The cluster ----------------------------------------------------------------------------------

KUBECONFIG: Final = "KUBECONFIG"  # a file variable in GitLab CI
KUBE_CONTEXT: Final = "KUBE_CONTEXT"  # the name Auto DevOps and GitLab's templates use
KUBERNETES_SERVICE_HOST: Final = "KUBERNETES_SERVICE_HOST"  # set in every pod: in-cluster
KUBERNETES_SERVICE_PORT: Final = "KUBERNETES_SERVICE_PORT"

# -- torchrun's (PyTorch's elastic launcher): what ci-runner sets for it ---------------------------

# The ranks' line prefix's template (ci_runner.torchrun_output): torch 2.13's torchrun reads it from
# this variable only, it has no option for it (torch/distributed/run.py).
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: Final = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

# -- The machine ----------------------------------------------------------------------------------

XDG_CACHE_HOME: Final = "XDG_CACHE_HOME"
HOME: Final = "HOME"
PATH: Final = "PATH"
PYTHONPATH: Final = "PYTHONPATH"

# -- Groups ---------------------------------------------------------------------------------------

# The GitLab API token ci-runner comments (and with `tracking: gitlab` tracks) with, in the order
# looked up: ci-runner's own variable, then the name other GitLab tools read.
GITLAB_TOKEN_VARIABLES: Final = (CI_RUNNER_GITLAB_TOKEN, GITLAB_TOKEN)
# GitLab credentials in the CI job's environment. Pods never get them, so neither do ranks on
# this machine (unless train.yaml lists one under `secrets`). CI_REPOSITORY_URL embeds the job
# token.
GITLAB_CREDENTIALS: Final = (
    CI_JOB_TOKEN,
    CI_RUNNER_GIT_TOKEN,
    CI_RUNNER_GITLAB_TOKEN,
    GITLAB_TOKEN,
    CI_REGISTRY_PASSWORD,
    CI_DEPENDENCY_PROXY_PASSWORD,
    CI_REPOSITORY_URL,
)
# Every variable whose value is masked wherever ci-runner writes: GitLab's, and the S3 secret
# (ranks do get that one: they read data from and write models to S3).
SECRET_VARIABLES: Final = (
    *GITLAB_CREDENTIALS,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
    MLFLOW_TRACKING_TOKEN,  # ci_runner.tracking: MLflow's own variables
    MLFLOW_TRACKING_PASSWORD,
    CI_RUNNER_MLFLOW_TOKEN,  # the ranks' own (train.yaml's tracking.ranks_log)
)
