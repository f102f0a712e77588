"""The configs and CI contexts the torchrun rendering tests share (tests/test_render_torchrun.py):
a torchrun job with every pod setting an MPIJob's workers have, a small one, and a merge
request pipeline's context."""

from __future__ import annotations

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
HOROVOD = TrainConfig(
    name="minimal", image="horovod/horovod:0.28.1", command=("python", "train.py")
)
# Every pod setting: placement, DNS, the pip cache claim, GPUs, secrets, tracking's inputs.
TORCHRUN = TrainConfig(
    name="ddp",
    image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    command=("python", "main_ddp.py", "--epochs", "20"),
    distributed="torchrun",
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
SMALL = TrainConfig(
    name="ddp",
    image="horovod/horovod:0.28.1",
    command=("python", "train.py"),
    distributed="torchrun",
    workers=2,
    timeout=3600,
)
# Horovod's jobs, each of a kind (tests/test_render.py's goldens hold their MPIJobs).
HOROVOD_CASES = {
    "minimal": (HOROVOD, LOCAL),
    "elastic": (TrainConfig(**{**HOROVOD.__dict__, "workers": 2, "elastic": Elastic(2, 4)}), LOCAL),
    "gang": (
        TrainConfig(**{**HOROVOD.__dict__, "kubernetes": KubernetesOptions(queue="research")}),
        MR_PIPELINE,
    ),
    "seed-like": (TrainConfig(**{**TORCHRUN.__dict__, "distributed": "horovod"}), MR_PIPELINE),
}
