"""testing.reference_schema: docs/train-yaml.md is generated from the schema and kept equal."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ci_runner.config.schema import SCHEMA, load_config
from ci_runner.config.types import (
    DnsConfig,
    KubernetesOptions,
    MetricSpec,
    Resources,
    Toleration,
    TrainConfig,
)
from testing.reference_schema import EXAMPLE, schema_markdown

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "train-yaml.md"


def test_reference_example() -> None:
    assert load_config(EXAMPLE, "jobs/train.yaml") == TrainConfig(
        name="simple-ml",
        image="horovod/horovod:0.28.1",
        command=("python", "examples/simple_ml/main_with_horovod.py"),
        workers=2,
        slots_per_worker=1,
        resources=Resources(gpu=1, cpu="4", memory="8Gi"),
        requirements="examples/simple_ml/requirements.txt",
        env=(("EPOCHS", "10"), ("LOG_LEVEL", "info")),
        secrets=("WANDB_API_KEY",),
        data="s3://datasets/diabetes/",
        outputs="s3://models/{project}/{sha}/{job}/",
        metrics=(
            MetricSpec(
                "train_loss",
                re.compile(r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+)"),
                "min",
            ),
            MetricSpec(
                "test_loss",
                re.compile(r"Testing\. MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"),
                "min",
            ),
        ),
        timeout=7200,
        kubernetes=KubernetesOptions(
            namespace="ml-training",
            tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
            node_selector=(("gpu-type", "a100"),),
            dns_config=DnsConfig(nameservers=("10.105.222.6",), options=(("ndots", "2"),)),
            service_account="trainer",
            image_pull_secrets=("registry-credentials",),
            pip_cache_pvc="pip-cache",
            pip_cache_access_mode="ReadWriteMany",
            ttl_seconds_after_finished=3600,
            setup_timeout=2700,
            unschedulable_timeout=600,
        ),
        source_file="jobs/train.yaml",
    )


def test_committed_reference_matches_the_schema() -> None:
    # The whole file, with what every rank sees after it: tests/test_docs.py.
    assert DOC.read_text(encoding="utf-8").startswith(schema_markdown()), (
        "docs/train-yaml.md is out of date: run .venv/bin/python -m testing.reference_docs"
    )


def test_reference_lists_every_field() -> None:
    markdown = schema_markdown()
    for spec in SCHEMA.fields:
        assert f"| `{spec.key}` |" in markdown
    assert (
        "| `kubernetes.tolerations[].effect` | `NoSchedule` or `PreferNoSchedule` or " in markdown
    )
    assert "| `metrics.<name>.pattern` | regular expression | required |" in markdown


def test_reference_example_is_valid_yaml_of_the_schema() -> None:
    block = schema_markdown().split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE
    assert isinstance(yaml.safe_load(block), dict)
    load_config(block)
