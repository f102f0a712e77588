"""The configs and CI contexts the rendering tests share (tests/test_render.py,
tests/test_render_torchrun.py, tests/test_backends_kubernetes_options.py): Horovod's jobs, one of
each kind, whose MPIJobs tests/test_render.py's goldens hold; the torchrun job of the same pod
settings and a small one; a local and a merge request pipeline's context."""

from __future__ import annotations

from dataclasses import replace

from ci_runner.config.types import (
    DnsConfig,
    Elastic,
    KubernetesOptions,
    Resources,
    Toleration,
    TrainConfig,
)
from ci_runner.context import CIContext

SHA = "0123456789abcdef0123456789abcdef01234567"

LOCAL = CIContext(
    sha=SHA,
    project_path="group/project",
    ref_name="main",
    repo_url="https://gitlab.example.com/group/project.git",
)
MR_PIPELINE = CIContext(
    sha=SHA,
    project_path="faraway/simple_ml",
    project_id="42",
    project_url="https://gitlab.bdap.com/faraway/simple_ml",
    server_url="https://gitlab.bdap.com",
    pipeline_id="1001",
    pipeline_source="merge_request_event",
    job_id="5005",
    job_url="https://gitlab.bdap.com/faraway/simple_ml/-/jobs/5005",
    ref_name="feature/faster-training",
    mr_iid="7",
    mr_target_branch="main",
    default_branch="main",
    repo_url="https://gitlab.bdap.com/faraway/simple_ml.git",
)
MINIMAL = TrainConfig(
    name="minimal", image="horovod/horovod:0.28.1", command=("python", "train.py")
)
# Every pod setting: placement, DNS, the pip cache claim, GPUs, secrets, tracking's inputs.
SEED_LIKE = TrainConfig(
    name="simple-ml",
    image="coreharbor.bdap.com/library/horovod-sw-base",
    command=("python", "main_with_horovod.py", "--epochs", "20"),
    workers=2,
    slots_per_worker=2,
    resources=Resources(gpu=2, cpu="8", memory="32Gi"),
    requirements="requirements.txt",
    env=(("LOG_LEVEL", "debug"), ("PYTHONPATH", "src")),
    secrets=("WANDB_API_KEY",),
    data="s3://datasets/diabetes/",
    outputs="s3://models/{project}/{sha}/{job}/",
    timeout=7200,
    kubernetes=KubernetesOptions(
        namespace="mpi-operator",
        tolerations=(
            Toleration(key="gpu", operator="Exists", effect="NoSchedule"),
            Toleration(
                key="spot",
                operator="Equal",
                value="true",
                effect="NoExecute",
                toleration_seconds=60,
            ),
        ),
        node_selector=(("accelerator", "nvidia-v100"), ("pool", "training")),
        dns_config=DnsConfig(
            nameservers=("10.105.222.6",),
            searches=("bdap.com",),
            options=(("ndots", "2"), ("edns0", None)),
        ),
        service_account="trainer",
        priority_class="high",
        image_pull_secrets=("harbor",),
        pip_cache_pvc="pip-cache",
        pip_cache_access_mode="ReadWriteMany",
        ttl_seconds_after_finished=600,
        backoff_limit=1,
    ),
    source_file="simple_ml/train.yaml",
)
ELASTIC = replace(MINIMAL, name="elastic", workers=2, elastic=Elastic(2, 4))
GANG = replace(
    MINIMAL,
    name="gang",
    workers=4,
    kubernetes=KubernetesOptions(queue="research", priority_class="batch"),
)
# Horovod's jobs, one of each kind (tests/test_render.py's goldens hold their MPIJobs).
CASES = {
    "minimal": (MINIMAL, LOCAL),
    "seed-like": (SEED_LIKE, MR_PIPELINE),
    "elastic": (ELASTIC, MR_PIPELINE),
    "gang-scheduled": (GANG, MR_PIPELINE),
}
# The torchrun job of the same pod settings, and a small one.
TORCHRUN = replace(
    SEED_LIKE,
    name="ddp",
    image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    command=("python", "main_ddp.py", "--epochs", "20"),
    distributed="torchrun",
)
SMALL = TrainConfig(
    name="ddp",
    image="horovod/horovod:0.28.1",
    command=("python", "train.py"),
    distributed="torchrun",
    workers=2,
    timeout=3600,
)
# What a kubelet would expand ($(VAR), $$) if a container's command, args or env held it as it
# is: every container must get this text literally.
TRICKY = "$(GIT_PASSWORD) $$ $(CI_RUNNER_SHA) $(A $( $"


def with_tricky_text(config: TrainConfig) -> TrainConfig:
    """``config`` with :data:`TRICKY` in its command's last argument and in two variables."""
    return replace(
        config,
        command=("python", "train.py", TRICKY),
        env=(("A", "x"), ("TRICKY", TRICKY), ("PIP_INDEX_URL", TRICKY)),
    )
