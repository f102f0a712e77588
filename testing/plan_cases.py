"""A run plan's inputs the plan tests share, what a rank sees of a rendered container, and the
merge request's context and config the comment is rendered for (tests/test_results_report.py,
bench/report_size.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ci_runner.config.types import Resources, TrainConfig
from ci_runner.context import CIContext
from ci_runner.plan.run_plan import RunPlan, build_plan
from ci_runner.policy import SETUP_IMAGE_VARIABLE, project_policy
from ci_runner.settings import read_settings
from testing.kubelet_expansion import container_view
from testing.metric_specs import TEST, TRAIN

SHA = "0123456789abcdef0123456789abcdef01234567"
# The image the pods' git fetch runs in, as a project's CI gives it (CI_JOB_IMAGE: ci-runner's).
SETUP_IMAGE = "registry.example.com/group/ci-runner:1.2.0"


def trusted_plan(
    config: TrainConfig, context: CIContext, env: Mapping[str, str] | None = None, **options: Any
) -> RunPlan:
    """:func:`build_plan` in a project whose CI names :data:`SETUP_IMAGE` (and whatever policy
    ``env`` sets): what rendering needs."""
    policy = project_policy({SETUP_IMAGE_VARIABLE: SETUP_IMAGE, **(env or {})})
    return build_plan(config, context, read_settings(env or {}), policy=policy, **options)


CONTEXT = CIContext(
    sha=SHA,
    project_path="group/project",
    job_id="5005",
    repo_url="https://gitlab.example.com/group/project.git",
)


CONFIG = TrainConfig(
    name="simple-ml",
    image="horovod/horovod:0.28.1",
    command=("python", "train.py"),
    workers=2,
    data="s3://datasets/d/",
    outputs="s3://models/{project}/{sha}/{job}/",
    env=(("LOG_LEVEL", "debug"), ("PYTHONPATH", "src")),
    secrets=("WANDB_API_KEY",),
)


REPORT_CONTEXT = CIContext(
    sha=SHA,
    project_path="faraway/simple_ml",
    project_id="7",
    project_url="https://gitlab.example.com/faraway/simple_ml",
    pipeline_id="45",
    job_id="123",
    job_url="https://gitlab.example.com/faraway/simple_ml/-/jobs/123",
    ref_name="feature/faster",
)


REPORT_CONFIG = TrainConfig(
    name="simple-ml",
    image="horovod/horovod:0.28.1",
    command=("python", "main_with_horovod.py"),
    workers=2,
    resources=Resources(gpu=1),
    metrics=(TRAIN, TEST),
)


ENV = {
    "CI_JOB_TOKEN": "glcbt-job-token-value",
    "WANDB_API_KEY": "wandb-secret-value",
    "PATH": "/usr/bin",
    "PYTHONPATH": "/opt/base",
}


def pod_environment(container: dict[str, Any], secret_data: dict[str, str]) -> dict[str, str]:
    """What a rank in this container sees: values as the kubelet expands them, secretKeyRefs read
    from the Secret."""
    env: dict[str, str] = container_view(
        container, lambda ref: secret_data[ref["secretKeyRef"]["key"]]
    )["env"]
    return env
