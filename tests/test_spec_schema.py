"""ci_runner.spec.schema: train.yaml → TrainConfig, every problem exactly worded, overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner.errors import ConfigError
from ci_runner.spec.schema import (
    EXAMPLE,
    SCHEMA,
    apply_overrides,
    expand_outputs,
    load_config,
    schema_markdown,
    slugify,
)
from ci_runner.spec.types import (
    DnsConfig,
    Elastic,
    KubernetesOptions,
    MetricSpec,
    Resources,
    Toleration,
    TrainConfig,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "train-yaml.md"

BASE = "name: job\nimage: img\ncommand: python train.py\n"
RESERVED = "DATA_URI, OUTPUT_URI, PIP_CACHE_DIR, GIT_USERNAME, GIT_PASSWORD and CI_RUNNER_*"
BASE_WITHOUT_COMMAND = "name: job\nimage: img\n"

SEED_JOB = r"""name: simple-ml
image: horovod/horovod:0.28.1
command: python main_with_horovod.py
workers: 2
resources: {gpu: 1, memory: 8Gi}
requirements: examples/simple_ml/requirements.txt
data: s3://datasets/diabetes/
outputs: s3://models/{project}/{sha}/{job}/
metrics:
  train_loss: {pattern: 'Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)', goal: min}
  test_loss: {pattern: 'Testing\. MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)', goal: min}
timeout: 2h
kubernetes:
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  dns_config: {nameservers: [10.105.222.6]}
"""  # noqa: E501


def problems(text: str | bytes, file: str = "train.yaml") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(text, file)
    return caught.value.lines()


def minimal(**changes: object) -> TrainConfig:
    config = TrainConfig(name="job", image="img", command=("python", "train.py"))
    return TrainConfig(**{**config.__dict__, **changes})


def test_seed_job() -> None:
    assert load_config(SEED_JOB) == TrainConfig(
        name="simple-ml",
        image="horovod/horovod:0.28.1",
        command=("python", "main_with_horovod.py"),
        workers=2,
        slots_per_worker=1,
        resources=Resources(gpu=1, cpu=None, memory="8Gi"),
        requirements="examples/simple_ml/requirements.txt",
        data="s3://datasets/diabetes/",
        outputs="s3://models/{project}/{sha}/{job}/",
        metrics=(
            MetricSpec(
                "train_loss",
                re.compile(
                    r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), "
                    r"Worker: (?P<rank>\d+)"
                ),
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
            tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
            dns_config=DnsConfig(nameservers=("10.105.222.6",)),
        ),
    )


def test_metric_patterns_match_the_seed_log() -> None:
    config = load_config(SEED_JOB)
    train, test = config.metrics
    match = train.pattern.search("Training. Epoch 3, MSE loss: 0.0123, Worker: 1")
    assert match is not None and match.groupdict() == {"step": "3", "value": "0.0123", "rank": "1"}
    match = test.pattern.search("Testing. MSE loss: 2.5e-03, Worker: 0")
    assert match is not None and match.groupdict() == {"value": "2.5e-03", "rank": "0"}


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
            ttl_seconds_after_finished=3600,
            unschedulable_timeout=600,
        ),
        source_file="jobs/train.yaml",
    )


def test_defaults() -> None:
    assert load_config(BASE) == minimal()
    assert load_config(BASE.encode()) == minimal()


def test_every_other_field() -> None:
    text = BASE + (
        "workers: 3\n"
        "slots_per_worker: 4\n"
        "resources: {gpu: 2, cpu: 500m, memory: 1.5Gi}\n"
        "env: {B: true, A: 0.001, C: yes, D: '', E: \"line\\nbreak\", F: 0x1F}\n"
        "metrics: {acc: {pattern: 'acc=(?P<value>[0-9.]+)(?:%)?', goal: max}}\n"
        "timeout: 1h30m\n"
        "elastic: {min_workers: 1, max_workers: 8}\n"
        "kubernetes:\n"
        "  tolerations:\n"
        "    - {key: nvidia.com/gpu, operator: Equal, value: 'true', effect: NoExecute,\n"
        "       toleration_seconds: 60}\n"
        "    - {operator: Exists}\n"
        "  node_selector: {b: 2, a: x}\n"
        "  dns_config: {searches: [svc.cluster.local], options: [{name: edns0}]}\n"
        "  priority_class: high\n"
        "  queue: training\n"
        "  ttl_seconds_after_finished: 0\n"
        "  backoff_limit: 2\n"
        "  unschedulable_timeout: 90\n"
    )
    assert load_config(text) == minimal(
        workers=3,
        slots_per_worker=4,
        resources=Resources(gpu=2, cpu="500m", memory="1.5Gi"),
        env=(
            ("A", "0.001"),
            ("B", "true"),
            ("C", "yes"),
            ("D", ""),
            ("E", "line\nbreak"),
            ("F", "0x1F"),
        ),
        metrics=(MetricSpec("acc", re.compile(r"acc=(?P<value>[0-9.]+)(?:%)?"), "max"),),
        timeout=5400,
        elastic=Elastic(1, 8),
        kubernetes=KubernetesOptions(
            tolerations=(
                Toleration("nvidia.com/gpu", "Equal", "true", "NoExecute", 60),
                Toleration(operator="Exists"),
            ),
            node_selector=(("a", "x"), ("b", "2")),
            dns_config=DnsConfig(searches=("svc.cluster.local",), options=(("edns0", None),)),
            priority_class="high",
            queue="training",
            ttl_seconds_after_finished=0,
            backoff_limit=2,
            unschedulable_timeout=90,
        ),
    )


@pytest.mark.parametrize(
    ("resources", "slots"),
    [("{gpu: 4}", 4), ("{gpu: 0}", 1), ("{cpu: 2}", 1)],
)
def test_slots_per_worker_defaults_to_gpus(resources: str, slots: int) -> None:
    assert load_config(BASE + f"resources: {resources}\n").slots_per_worker == slots


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("python train.py --lr 0.1", ("python", "train.py", "--lr", "0.1")),
        ("python -c 'print(1)'", ("python", "-c", "print(1)")),
        (
            "[python, train.py, --epochs, 5, --lr, 1.0e-3]",
            ("python", "train.py", "--epochs", "5", "--lr", "1.0e-3"),
        ),
        ("|\n  python train.py\n  --epochs 2\n", ("python", "train.py", "--epochs", "2")),
        ("[sh, -c, 'echo $HOME', '']", ("sh", "-c", "echo $HOME", "")),
    ],
)
def test_command_forms(command: str, argv: tuple[str, ...]) -> None:
    assert load_config(BASE_WITHOUT_COMMAND + f"command: {command}\n").command == argv


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("90", 90),
        ("'600'", 600),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("7d", 604800),
    ],
)
def test_durations(timeout: str, seconds: int) -> None:
    assert load_config(BASE + f"timeout: {timeout}\n").timeout == seconds


@pytest.mark.parametrize(
    ("uri", "field"),
    [
        ("s3://bucket", "data"),
        ("s3://my.bucket-1/a/b/", "data"),
        ("file:///srv/data/", "data"),
        ("s3://models/{project}/{sha}/{job}/", "outputs"),
        ("file:///tmp/out/{job}/{{literal}}/", "outputs"),
    ],
)
def test_uris(uri: str, field: str) -> None:
    assert getattr(load_config(BASE + f"{field}: '{uri}'\n"), field) == uri


def test_requirements_path_is_normalised() -> None:
    assert load_config(BASE + "requirements: ./ml//reqs.txt\n").requirements == "ml/reqs.txt"


def test_anchors_may_share_a_toleration() -> None:
    text = BASE + (
        "kubernetes:\n"
        "  tolerations:\n"
        "    - &gpu {key: gpu, operator: Exists, effect: NoSchedule}\n"
        "    - *gpu\n"
    )
    toleration = Toleration(key="gpu", operator="Exists", effect="NoSchedule")
    assert load_config(text).kubernetes.tolerations == (toleration, toleration)


ONE_PROBLEM = [
    (
        "workers: two",
        "train.yaml:4: workers: must be a whole number, got the string 'two'; fix: write a "
        "whole number, e.g. workers: 2",
    ),
    (
        "workers: 0",
        "train.yaml:4: workers: must be at least 1, got 0; fix: use a whole number from 1 "
        "to 512, e.g. workers: 2",
    ),
    (
        "workers: 513",
        "train.yaml:4: workers: must be at most 512, got 513; fix: use a whole number from "
        "1 to 512, e.g. workers: 2",
    ),
    (
        "workers: 2.5",
        "train.yaml:4: workers: must be a whole number, got the number 2.5; fix: write a "
        "whole number, e.g. workers: 2",
    ),
    (
        "workers: true",
        "train.yaml:4: workers: must be a whole number, got the boolean true; fix: write a "
        "whole number, e.g. workers: 2",
    ),
    (
        "workers: null",
        "train.yaml:4: workers: must be a whole number, got null (an empty value); fix: "
        "write a whole number, e.g. workers: 2",
    ),
    (
        "workers:",
        "train.yaml:4: workers: must be a whole number, got null (an empty value); fix: "
        "write a whole number, e.g. workers: 2",
    ),
    (
        "workers: '2'",
        "train.yaml:4: workers: must be a whole number, got the string '2'; fix: write a "
        "whole number, e.g. workers: 2",
    ),
    (
        "workers: [2]",
        "train.yaml:4: workers: must be a whole number, got a list; fix: write a whole "
        "number, e.g. workers: 2",
    ),
    (
        "slots_per_worker: 0",
        "train.yaml:4: slots_per_worker: must be at least 1, got 0; fix: use a whole "
        "number from 1 to 256, e.g. slots_per_worker: 1",
    ),
    (
        "resources: 4",
        "train.yaml:4: resources: must be a mapping, got the number 4; fix: write a "
        "mapping, e.g. resources: {gpu: 1, memory: 8Gi}",
    ),
    (
        "resources: {gpu: 1.5}",
        "train.yaml:4: resources.gpu: must be a whole number, got the number 1.5; fix: "
        "write a whole number, e.g. gpu: 1",
    ),
    (
        "resources: {cpu: 0}",
        "train.yaml:4: resources.cpu: must be more than 0, got '0'; fix: request a "
        "positive amount, e.g. cpu: 4",
    ),
    (
        "resources: {cpu: -1}",
        "train.yaml:4: resources.cpu: must be a Kubernetes quantity such as 4, 500m or "
        "8Gi, got '-1'; fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, "
        "Gi, ...), e.g. cpu: 4",
    ),
    (
        "resources: {memory: 8GB}",
        "train.yaml:4: resources.memory: must be a Kubernetes quantity such as 4, 500m or "
        "8Gi, got '8GB'; fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, "
        "Gi, ...), e.g. memory: 8Gi",
    ),
    (
        "resources: {memory: true}",
        "train.yaml:4: resources.memory: must be a Kubernetes quantity such as 4, 500m or "
        "8Gi, got the boolean true; fix: write a Kubernetes quantity such as 4, 500m or "
        "8Gi, e.g. memory: 8Gi",
    ),
    (
        "resources: {gpus: 1}",
        "train.yaml:4: resources.gpus: unknown key; fix: did you mean 'gpu'?",
    ),
    (
        "resources: {gpu: 65}",
        "train.yaml:4: resources.gpu: must be at most 64, got 65; fix: use a whole number "
        "from 0 to 64, e.g. gpu: 1",
    ),
    (
        "requirements: /etc/passwd",
        "train.yaml:4: requirements: must be relative to the repository root, got the "
        "absolute path '/etc/passwd'; fix: write the path from the repository root, e.g. "
        "requirements: requirements.txt",
    ),
    (
        "requirements: a/../../x",
        "train.yaml:4: requirements: must stay inside the repository ('..' is not "
        "allowed), got 'a/../../x'; fix: write the path from the repository root, e.g. "
        "requirements: requirements.txt",
    ),
    (
        "requirements: reqs/",
        "train.yaml:4: requirements: must name a file, got 'reqs/'; fix: write the file's "
        "path from the repository root, e.g. requirements: requirements.txt",
    ),
    (
        "requirements: 'C:\\\\x.txt'",
        "train.yaml:4: requirements: must be relative to the repository root, got the "
        "absolute path 'C:\\\\\\\\x.txt'; fix: write the path from the repository root, "
        "e.g. requirements: requirements.txt",
    ),
    (
        "requirements: 5",
        "train.yaml:4: requirements: must be a string, got the number 5; fix: write a "
        "string, e.g. requirements: requirements.txt",
    ),
    (
        "env: [A]",
        "train.yaml:4: env: must be a mapping, got a list; fix: write a mapping, e.g. env: "
        "{EPOCHS: 10}",
    ),
    (
        "env: {CI_RUNNER_SHA: x}",
        "train.yaml:4: env.CI_RUNNER_SHA: CI_RUNNER_SHA is set by ci-runner for every "
        f"rank; fix: choose another name ({RESERVED} are reserved)",
    ),
    (
        "env: {OUTPUT_URI: x}",
        "train.yaml:4: env.OUTPUT_URI: OUTPUT_URI is set by ci-runner for every rank; fix: "
        f"choose another name ({RESERVED} are reserved)",
    ),
    (
        "env: {GIT_PASSWORD: x}",
        "train.yaml:4: env.GIT_PASSWORD: GIT_PASSWORD is set by ci-runner for every rank; fix: "
        f"choose another name ({RESERVED} are reserved)",
    ),
    (
        "env: {'A B': x}",
        "train.yaml:4: env['A B']: 'A B' is not a valid environment variable name; fix: "
        "use letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
    ),
    (
        "env: {A: null}",
        "train.yaml:4: env.A: must be a string, got null (an empty value); fix: write a "
        "string, e.g. env: {EPOCHS: 10}",
    ),
    (
        "env: {A: [1]}",
        "train.yaml:4: env.A: must be a string, got a list; fix: write a string, e.g. env: "
        "{EPOCHS: 10}",
    ),
    (
        'env: {A: "x\\0y"}',
        "train.yaml:4: env.A: must not contain a NUL character; fix: remove it",
    ),
    (
        "secrets: WANDB",
        "train.yaml:4: secrets: must be a list, got the string 'WANDB'; fix: write a list, "
        "e.g. secrets: [WANDB_API_KEY]",
    ),
    (
        "secrets: [1X]",
        "train.yaml:4: secrets[0]: '1X' is not a valid environment variable name; fix: use "
        "letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
    ),
    (
        "secrets: [A, A]",
        "train.yaml:4: secrets[1]: repeats 'A' (also item 0); fix: list each one once",
    ),
    (
        "secrets: [DATA_URI]",
        "train.yaml:4: secrets[0]: DATA_URI is set by ci-runner for every rank; fix: "
        f"choose another name ({RESERVED} are reserved)",
    ),
    (
        "secrets: [5]",
        "train.yaml:4: secrets[0]: must be a string, got the number 5; fix: write a "
        "string, e.g. secrets: [WANDB_API_KEY]",
    ),
    (
        "data: s3://Bad_Bucket/x",
        "train.yaml:4: data: has an invalid S3 bucket name 'Bad_Bucket'; fix: use 3-63 "
        "lowercase letters, digits, '.' and '-', e.g. s3://models/runs/",
    ),
    (
        "data: s3://",
        "train.yaml:4: data: has an invalid S3 bucket name ''; fix: use 3-63 lowercase "
        "letters, digits, '.' and '-', e.g. s3://models/runs/",
    ),
    (
        "data: file://relative/x",
        "train.yaml:4: data: must name an absolute path (file:///path), got "
        "'file://relative/x'; fix: write three slashes, e.g. file:///relative/x",
    ),
    (
        "data: /abs/path",
        "train.yaml:4: data: must be an s3:// or file:// URI, got '/abs/path' (no scheme); "
        "fix: write s3://bucket/path/ or file:///absolute/path/",
    ),
    (
        "data: gs://b/x",
        "train.yaml:4: data: must be an s3:// or file:// URI, got the scheme gs://; fix: "
        "write s3://bucket/path/ or file:///absolute/path/",
    ),
    (
        "data: 's3://b/x y'",
        "train.yaml:4: data: must not contain spaces, got 's3://b/x y'; fix: remove the "
        "spaces, e.g. data: s3://datasets/diabetes/",
    ),
    (
        "data: ''",
        "train.yaml:4: data: must not be empty; fix: write a value, e.g. data: "
        "s3://datasets/diabetes/",
    ),
    (
        "outputs: s3://models/{sha:.8}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{sha:.8}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{sha!r}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{sha!r}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{/",
        "train.yaml:4: outputs: has an unmatched '{' or '}': 's3://models/{/'; fix: use "
        "only the placeholders {project}, {sha}, {job}; write {{ or }} for a literal brace",
    ),
    (
        "outputs: s3://models/}/",
        "train.yaml:4: outputs: has an unmatched '{' or '}': 's3://models/}/'; fix: use "
        "only the placeholders {project}, {sha}, {job}; write {{ or }} for a literal brace",
    ),
    (
        "outputs: s3://models/{}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{0}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{0}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "metrics: [loss]",
        "train.yaml:4: metrics: must be a mapping, got a list; fix: write a mapping, e.g. "
        "metrics: {train_loss: {pattern: 'loss: (?P<value>[-+0-9.eE]+)'}}",
    ),
    (
        "metrics: {loss: '(?P<value>x)'}",
        "train.yaml:4: metrics.loss: must be a mapping, got the string '(?P<value>x)'; "
        "fix: write a mapping, e.g. metrics: {train_loss: {pattern: 'loss: "
        "(?P<value>[-+0-9.eE]+)'}}",
    ),
    (
        "metrics: {loss: {goal: min}}",
        "train.yaml:4: metrics.loss.pattern: is required; fix: add it, e.g. pattern: "
        "'loss: (?P<value>[-+0-9.eE]+)'",
    ),
    (
        "metrics: {loss: {pattern: 'x'}}",
        "train.yaml:4: metrics.loss.pattern: has no group named 'value' (the metric's "
        "number); fix: mark the number with (?P<value>...), e.g. 'loss: "
        "(?P<value>[-+0-9.eE]+)'",
    ),
    (
        "metrics: {loss: {pattern: '[z-a](?P<value>x)'}}",
        "train.yaml:4: metrics.loss.pattern: is not a valid regular expression: bad "
        "character range z-a at position 1; fix: correct the pattern (in single quotes "
        "YAML keeps backslashes as written)",
    ),
    (
        "metrics: {loss: {pattern: '(?P<value>x)', goal: MAX}}",
        "train.yaml:4: metrics.loss.goal: must be one of min, max, got 'MAX'; fix: did you "
        "mean 'max'?",
    ),
    (
        "metrics: {loss: {pattern: '(?P<value>x)', goal: maximum}}",
        "train.yaml:4: metrics.loss.goal: must be one of min, max, got 'maximum'; fix: did "
        "you mean 'max'?",
    ),
    (
        "metrics: {'1loss': {pattern: '(?P<value>x)'}}",
        "train.yaml:4: metrics.1loss: '1loss' is not a valid metric name; fix: use at most "
        "63 letters, digits and '_', not starting with a digit, e.g. train_loss",
    ),
    (
        "metrics: {loss: {pattern: '(?P<value>x)', patern: y}}",
        "train.yaml:4: metrics.loss.patern: unknown key; fix: did you mean 'pattern'?",
    ),
    (
        "metrics: {loss: {pattern: '(?P<value>x)(?P<epoch>\\d+)'}}",
        "train.yaml:4: metrics.loss.pattern: has the named group 'epoch'; only 'value', "
        "'step' and 'rank' are read; fix: rename it to one of those, or make it unnamed: ( "
        "... ) instead of (?P<epoch> ... )",
    ),
    (
        "metrics: {loss: {pattern: 'a{99999999999}(?P<value>x)'}}",
        "train.yaml:4: metrics.loss.pattern: is not a valid regular expression: the "
        "repetition number is too large; fix: simplify the pattern",
    ),
    (
        "timeout: 0",
        "train.yaml:4: timeout: must be more than 0 and at most 7 days, got 0; fix: use a "
        "duration from 1s to 7d, e.g. timeout: 2h",
    ),
    (
        "timeout: 8d",
        "train.yaml:4: timeout: must be more than 0 and at most 7 days, got 8d; fix: use a "
        "duration from 1s to 7d, e.g. timeout: 2h",
    ),
    (
        "timeout: 2 hours",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got '2 "
        "hours'; fix: write a number with units d, h, m, s in that order, e.g. timeout: 2h",
    ),
    (
        "timeout: 30m2h",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got '30m2h'; "
        "fix: write a number with units d, h, m, s in that order, e.g. timeout: 2h",
    ),
    (
        "timeout: 1.5",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got the "
        "number 1.5; fix: write a duration such as 90m, 2h or 1h30m, e.g. timeout: 2h",
    ),
    (
        "timeout: ''",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got ''; fix: "
        "write a number with units d, h, m, s in that order, e.g. timeout: 2h",
    ),
    (
        "timeout: true",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got the "
        "boolean true; fix: write a duration such as 90m, 2h or 1h30m, e.g. timeout: 2h",
    ),
    (
        "timeout: 1:30",
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got 1:30 "
        "(YAML reads it as the base-60 number 90); fix: write the unit, e.g. timeout: 2h",
    ),
    (
        "elastic: {min_workers: 1}",
        "train.yaml:4: elastic.max_workers: is required; fix: add it, e.g. max_workers: 4",
    ),
    (
        "elastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be between elastic.min_workers and "
        "elastic.max_workers (2-4), got 1; fix: set workers to how many workers to start "
        "with, within that range",
    ),
    (
        "workers: 5\nelastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be between elastic.min_workers and "
        "elastic.max_workers (2-4), got 5; fix: set workers to how many workers to start "
        "with, within that range",
    ),
    (
        "elastic: {min_workers: 0, max_workers: 4}",
        "train.yaml:4: elastic.min_workers: must be at least 1, got 0; fix: use a whole "
        "number from 1 to 512, e.g. min_workers: 1",
    ),
    (
        "kubernetes: {namespace: -ml}",
        "train.yaml:4: kubernetes.namespace: must be a Kubernetes namespace name "
        "(lowercase letters, digits and '-', starting and ending with a letter or digit, "
        "at most 63 characters), got '-ml'; fix: write e.g. ml",
    ),
    (
        "kubernetes: {namespace: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}",
        "train.yaml:4: kubernetes.namespace: must be a Kubernetes namespace name "
        "(lowercase letters, digits and '-', starting and ending with a letter or digit, "
        "at most 63 characters), got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'; fix: "
        "write e.g. aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ),
    (
        "kubernetes: null",
        "train.yaml:4: kubernetes: must be a mapping, got null (an empty value); fix: "
        "write a mapping, e.g. kubernetes: {namespace: ml-training}",
    ),
    (
        "kubernetes:",
        "train.yaml:4: kubernetes: must be a mapping, got null (an empty value); fix: "
        "write a mapping, e.g. kubernetes: {namespace: ml-training}",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, operator: Exists, value: x}]}",
        "train.yaml:4: kubernetes.tolerations[0].value: must not be set when operator is "
        "Exists; fix: remove value, or use operator: Equal",
    ),
    (
        "kubernetes: {tolerations: [{effect: NoSchedule}]}",
        "train.yaml:4: kubernetes.tolerations[0].key: is required when operator is Equal "
        "(the default); fix: add the taint's key, or use operator: Exists to tolerate "
        "every taint",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, toleration_seconds: 5}]}",
        "train.yaml:4: kubernetes.tolerations[0].toleration_seconds: needs effect: "
        "NoExecute; fix: set effect: NoExecute, or remove toleration_seconds",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, operator: exists}]}",
        "train.yaml:4: kubernetes.tolerations[0].operator: must be one of Exists, Equal, "
        "got 'exists'; fix: did you mean 'Exists'?",
    ),
    (
        "kubernetes: {tolerations: [gpu]}",
        "train.yaml:4: kubernetes.tolerations[0]: must be a mapping, got the string 'gpu'; "
        "fix: write a mapping, e.g. tolerations: [{key: gpu, operator: Exists, effect: "
        "NoSchedule}]",
    ),
    (
        "kubernetes: {tolerations: [{key: 'a b'}]}",
        "train.yaml:4: kubernetes.tolerations[0].key: must be a Kubernetes label key (an "
        "optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.'), "
        "got 'a b'; fix: write a key such as gpu or nvidia.com/gpu",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, value: 'a b'}]}",
        "train.yaml:4: kubernetes.tolerations[0].value: must be a Kubernetes label value "
        "(at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter "
        "or digit), got 'a b'; fix: write a value such as true or a100",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, toleration_seconds: -1, effect: NoExecute}]}",
        "train.yaml:4: kubernetes.tolerations[0].toleration_seconds: must be at least 0, "
        "got -1; fix: use a whole number from 0 to 2147483647, e.g. toleration_seconds: "
        "300",
    ),
    (
        "kubernetes: {node_selector: {'bad key!': x}}",
        "train.yaml:4: kubernetes.node_selector['bad key!']: must be a Kubernetes label "
        "key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or "
        "'.'), got 'bad key!'; fix: write a key such as gpu or nvidia.com/gpu",
    ),
    (
        "kubernetes: {node_selector: [gpu]}",
        "train.yaml:4: kubernetes.node_selector: must be a mapping, got a list; fix: write "
        "a mapping, e.g. node_selector: {gpu-type: a100}",
    ),
    (
        "kubernetes: {dns_config: {nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3, 4.4.4.4]}}",
        "train.yaml:4: kubernetes.dns_config.nameservers: may have at most 3 items, got 4; "
        "fix: remove 1",
    ),
    (
        "kubernetes: {dns_config: {options: [{value: 2}]}}",
        "train.yaml:4: kubernetes.dns_config.options[0].name: is required; fix: add it, "
        "e.g. name: ndots",
    ),
    (
        "kubernetes: {dns_config: {searches: ['a b']}}",
        "train.yaml:4: kubernetes.dns_config.searches[0]: must not contain spaces, got 'a "
        "b'; fix: remove the spaces, e.g. searches: [svc.cluster.local]",
    ),
    (
        "kubernetes: {service_account: Trainer}",
        "train.yaml:4: kubernetes.service_account: must be a Kubernetes object name "
        "(lowercase letters, digits, '-' and '.', starting and ending with a letter or "
        "digit, at most 253 characters), got 'Trainer'; fix: write e.g. trainer",
    ),
    (
        "kubernetes: {image_pull_secrets: [a, a]}",
        "train.yaml:4: kubernetes.image_pull_secrets[1]: repeats 'a' (also item 0); fix: "
        "list each one once",
    ),
    (
        "kubernetes: {ttl_seconds_after_finished: -1}",
        "train.yaml:4: kubernetes.ttl_seconds_after_finished: must be at least 0, got -1; "
        "fix: use a whole number from 0 to 2147483647, e.g. ttl_seconds_after_finished: "
        "3600",
    ),
    (
        "kubernetes: {backoff_limit: 3000000000}",
        "train.yaml:4: kubernetes.backoff_limit: must be at most 2147483647, got "
        "3000000000; fix: use a whole number from 0 to 2147483647, e.g. backoff_limit: 0",
    ),
    (
        "kubernetes: {unschedulable_timeout: 5x}",
        "train.yaml:4: kubernetes.unschedulable_timeout: must be a duration such as 90m, "
        "2h or 1h30m, got '5x'; fix: write a number with units d, h, m, s in that order, "
        "e.g. unschedulable_timeout: 10m",
    ),
    (
        "kubernetes: {queue: 'my queue'}",
        "train.yaml:4: kubernetes.queue: must be a Kubernetes object name (lowercase "
        "letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
        "253 characters), got 'my queue'; fix: write e.g. my-queue",
    ),
    (
        "kubernetes: {pip_cache_pvc: ''}",
        "train.yaml:4: kubernetes.pip_cache_pvc: must not be empty; fix: write a value, "
        "e.g. pip_cache_pvc: pip-cache",
    ),
    (
        "kubernetes: {namspace: ml}",
        "train.yaml:4: kubernetes.namspace: unknown key; fix: did you mean 'namespace'?",
    ),
    (
        "kubernetes: {zzz: 1}",
        "train.yaml:4: kubernetes.zzz: unknown key; fix: remove it; allowed keys: "
        "namespace, tolerations, node_selector, dns_config, service_account, "
        "priority_class, image_pull_secrets, queue, pip_cache_pvc, "
        "ttl_seconds_after_finished, backoff_limit, unschedulable_timeout",
    ),
    (
        "foo: 1",
        "train.yaml:4: foo: unknown key; fix: remove it; allowed keys: name, image, "
        "command, workers, slots_per_worker, resources, requirements, env, secrets, data, "
        "outputs, metrics, timeout, elastic, kubernetes",
    ),
    (
        "command: ''",
        "train.yaml:3: command: must not be empty; fix: write what every rank runs, e.g. "
        "command: python train.py --epochs 10",
    ),
    (
        "command: []",
        "train.yaml:3: command: must not be empty; fix: write what every rank runs, e.g. "
        "command: python train.py --epochs 10",
    ),
    (
        "command: [python, 3, true, null]",
        "train.yaml:3: command[3]: must be a string, got null (an empty value); fix: write "
        "a string, e.g. command: python train.py --epochs 10",
    ),
    (
        "command: {a: 1}",
        "train.yaml:3: command: must be a string or a list of strings, got a mapping; fix: "
        "write a string or a list of strings, e.g. command: python train.py --epochs 10",
    ),
    (
        'command: "python \'x"',
        'train.yaml:3: command: has an unbalanced quote or a trailing backslash: "python '
        "'x\"; fix: close every quote, or write the command as a list of strings",
    ),
    (
        "command: 'a\\'",
        "train.yaml:3: command: has an unbalanced quote or a trailing backslash: 'a\\\\'; "
        "fix: close every quote, or write the command as a list of strings",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), ONE_PROBLEM)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    base = BASE_WITHOUT_COMMAND if snippet.startswith("command:") else BASE
    assert problems(base + snippet + "\n") == [expected]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "image: x",
            [
                "train.yaml:1: name: is required; fix: add it, e.g. name: simple-ml",
                "train.yaml:1: command: is required; fix: add it, e.g. command: python "
                "train.py --epochs 10",
            ],
        ),
        (
            "name: A B\nimage: x\ncommand: y",
            [
                "train.yaml:1: name: must be lowercase letters, digits and '-', start with a "
                "letter and end with a letter or digit, got 'A B'; fix: write name: a-b"
            ],
        ),
        (
            "name: " + "a" * 30 + "\nimage: x\ncommand: x",
            [
                "train.yaml:1: name: must be at most 24 characters (it names the job's pods), "
                "got 30; fix: shorten it, e.g. name: aaaaaaaaaaaaaaaaaaaaaaaa"
            ],
        ),
        (
            "name: modèle-été\nimage: x\ncommand: x",
            [
                "train.yaml:1: name: must be lowercase letters, digits and '-', start with a "
                "letter and end with a letter or digit, got 'modèle-été'; "
                "fix: write name: modele-ete"
            ],
        ),
        (
            "name: ''\nimage: ''\ncommand: ''",
            [
                "train.yaml:1: name: must not be empty; fix: write a value, e.g. name: simple-ml",
                "train.yaml:2: image: must not be empty; fix: write a value, "
                "e.g. image: horovod/horovod:0.28.1",
                "train.yaml:3: command: must not be empty; fix: write what every rank runs, "
                "e.g. command: python train.py --epochs 10",
            ],
        ),
    ],
)
def test_required_fields_and_names(text: str, expected: list[str]) -> None:
    assert problems(text) == expected


def test_every_problem_in_one_run_in_line_order() -> None:
    text = (
        "name: Simple_ML\n"  # 1
        "image: horovod/horovod:0.28.1\n"  # 2
        "command: python main.py\n"  # 3
        "kubernetes:\n"  # 4
        "  namespace: ml\n"  # 5
        "  tolerations:\n"  # 6
        "    - key: gpu\n"  # 7
        "      operator: Exists\n"  # 8
        "      effect: NoSchedul\n"  # 9
        "worker: 2\n"  # 10
        "resources: {gpu: one}\n"  # 11
        "metrics:\n"  # 12
        "  loss:\n"  # 13
        "    pattern: 'loss=([0-9.]+'\n"  # 14
        "timeout: 2 hours\n"  # 15
        "outputs: s3://models/{branch}/\n"  # 16
        "name: again\n"  # 17
    )
    assert problems(text, "ml/train.yaml") == [
        "ml/train.yaml:1: name: must be lowercase letters, digits and '-', start with a letter "
        "and end with a letter or digit, got 'Simple_ML'; fix: write name: simple-ml",
        "ml/train.yaml:9: kubernetes.tolerations[0].effect: must be one of NoSchedule, "
        "PreferNoSchedule, NoExecute, got 'NoSchedul'; fix: did you mean 'NoSchedule'?",
        "ml/train.yaml:10: worker: unknown key; fix: did you mean 'workers'?",
        "ml/train.yaml:11: resources.gpu: must be a whole number, got the string 'one'; "
        "fix: write a whole number, e.g. gpu: 1",
        "ml/train.yaml:14: metrics.loss.pattern: is not a valid regular expression: missing ), "
        "unterminated subpattern at position 5; fix: correct the pattern (in single quotes YAML "
        "keeps backslashes as written)",
        "ml/train.yaml:15: timeout: must be a duration such as 90m, 2h or 1h30m, got '2 hours'; "
        "fix: write a number with units d, h, m, s in that order, e.g. timeout: 2h",
        "ml/train.yaml:16: outputs: uses the unknown placeholder '{branch}'; "
        "fix: use only the placeholders {project}, {sha}, {job}",
        "ml/train.yaml:17: name: is a duplicate key (first at line 1); "
        "fix: keep one of the two entries",
    ]


def test_cross_field_checks_run_beside_field_errors() -> None:
    text = BASE + (
        "workers: 9\n"  # 4
        "secrets: [TOKEN]\n"  # 5
        "env: {TOKEN: x}\n"  # 6
        "elastic: {min_workers: 2, max_workers: 4}\n"  # 7
        "kubernetes:\n"  # 8
        "  tolerations:\n"  # 9
        "    - operator: Exists\n"  # 10
        "      value: x\n"  # 11
        "      toleration_seconds: 5\n"  # 12
        "      bogus: 1\n"  # 13
    )
    assert problems(text) == [
        "train.yaml:4: workers: must be between elastic.min_workers and elastic.max_workers "
        "(2-4), got 9; fix: set workers to how many workers to start with, within that range",
        "train.yaml:5: secrets[0]: TOKEN is also set in env; fix: keep it in one place: secrets "
        "for CI variables, env for plain values",
        "train.yaml:11: kubernetes.tolerations[0].value: must not be set when operator is "
        "Exists; fix: remove value, or use operator: Equal",
        "train.yaml:12: kubernetes.tolerations[0].toleration_seconds: needs effect: NoExecute; "
        "fix: set effect: NoExecute, or remove toleration_seconds",
        "train.yaml:13: kubernetes.tolerations[0].bogus: unknown key; fix: remove it; allowed "
        "keys: key, operator, value, effect, toleration_seconds",
    ]


def test_an_invalid_value_is_not_also_checked_against_other_fields() -> None:
    assert problems(BASE + "workers: two\nelastic: {min_workers: 2, max_workers: 4}\n") == [
        "train.yaml:4: workers: must be a whole number, got the string 'two'; "
        "fix: write a whole number, e.g. workers: 2"
    ]


def test_examples_in_the_repository_are_valid() -> None:
    examples = sorted((REPO_ROOT / "examples").glob("*/train.yaml"))
    assert examples
    for path in examples:
        load_config(path.read_bytes(), path.relative_to(REPO_ROOT).as_posix())


def test_yaml_problems_are_reported_with_schema_problems() -> None:
    assert problems(BASE + "workers: 0\nworkers: 2\n") == [
        "train.yaml:4: workers: must be at least 1, got 0; fix: use a whole number from 1 to "
        "512, e.g. workers: 2",
        "train.yaml:5: workers: is a duplicate key (first at line 4); "
        "fix: keep one of the two entries",
    ]


def test_unparseable_file_is_one_problem() -> None:
    assert problems(b"name: job\n\tworkers: 2\n") == [
        "train.yaml:2: contains a tab character where YAML expects spaces (tabs cannot indent "
        "YAML); fix: indent with spaces instead of tabs"
    ]


def test_keys_in_the_wrong_block_are_pointed_home() -> None:
    text = BASE + (
        "namespace: ml\n"  # 4
        "resources: {gpu: 1, timeout: 2h}\n"  # 5
        "kubernetes:\n"  # 6
        "  nameservers: [10.0.0.1]\n"  # 7
        "  node_selectr: {a: b}\n"  # 8
    )
    assert problems(text) == [
        "train.yaml:4: namespace: unknown key; fix: namespace belongs under kubernetes; "
        "move it there",
        "train.yaml:5: resources.timeout: unknown key; fix: timeout belongs at the top level; "
        "move it there",
        "train.yaml:7: kubernetes.nameservers: unknown key; fix: nameservers belongs under "
        "kubernetes.dns_config; move it there",
        "train.yaml:8: kubernetes.node_selectr: unknown key; fix: did you mean 'node_selector'?",
    ]


def test_slugify() -> None:
    assert slugify("Simple_ML v2") == "simple-ml-v2"
    assert slugify("2nd run") == "nd-run"
    assert slugify("---") == "job"
    assert slugify("a" * 30 + "-b") == "a" * 24
    assert slugify("abc" * 8 + "-xyz") == "abc" * 8


# ---------------------------------------------------------------------------------------------
# Overrides from pipeline variables.


def test_overrides_replace_workers_and_append_arguments() -> None:
    config = load_config(BASE)
    assert apply_overrides(config, workers=" 4 ", extra_args="--lr 0.5 --name 'a b'") == minimal(
        workers=4, command=("python", "train.py", "--lr", "0.5", "--name", "a b")
    )


@pytest.mark.parametrize(("workers", "extra_args"), [(None, None), ("", ""), ("  ", " \n")])
def test_empty_overrides_change_nothing(workers: str | None, extra_args: str | None) -> None:
    config = load_config(BASE)
    assert apply_overrides(config, workers=workers, extra_args=extra_args) == config


@pytest.mark.parametrize(
    ("workers", "extra_args", "expected"),
    [
        (
            "two",
            None,
            [
                "CI_RUNNER_WORKERS: must be a whole number, got 'two'; "
                "fix: set CI_RUNNER_WORKERS to a number from 1 to 512, e.g. 2"
            ],
        ),
        (
            "0",
            None,
            [
                "CI_RUNNER_WORKERS: must be from 1 to 512, got 0; "
                "fix: set CI_RUNNER_WORKERS to a number from 1 to 512"
            ],
        ),
        (
            "-3",
            "--x 'y",
            [
                "CI_RUNNER_WORKERS: must be a whole number, got '-3'; "
                "fix: set CI_RUNNER_WORKERS to a number from 1 to 512, e.g. 2",
                'CI_RUNNER_ARGS: has an unbalanced quote or a trailing backslash: "--x \'y"; '
                "fix: close every quote (the value is split like a shell command line)",
            ],
        ),
        (
            "٣",
            None,
            [
                "CI_RUNNER_WORKERS: must be a whole number, got '٣'; "
                "fix: set CI_RUNNER_WORKERS to a number from 1 to 512, e.g. 2"
            ],
        ),
        (
            None,
            "a\x00b",
            ["CI_RUNNER_ARGS: must not contain a NUL character; fix: remove it"],
        ),
    ],
)
def test_override_problems(
    workers: str | None, extra_args: str | None, expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_overrides(load_config(BASE), workers=workers, extra_args=extra_args)
    assert caught.value.lines() == expected


def test_absurd_numbers_are_cut_short_and_never_crash() -> None:
    nines = "9" * 5000
    assert problems(BASE + f"workers: {nines}\ntimeout: '{nines}h'\n") == [
        "train.yaml:4: workers: '9999999999999999999999999999999999999...' is too long a "
        "number; fix: shorten it",
        "train.yaml:5: timeout: must be a duration such as 90m, 2h or 1h30m, "
        "got '9999999999999999999999999999999999999...'; "
        "fix: write a number with units d, h, m, s in that order, e.g. timeout: 2h",
    ]
    with pytest.raises(ConfigError) as caught:
        apply_overrides(load_config(BASE), workers=nines, extra_args=None)
    assert caught.value.lines() == [
        "CI_RUNNER_WORKERS: must be from 1 to 512, got 99999999999999999...; "
        "fix: set CI_RUNNER_WORKERS to a number from 1 to 512"
    ]
    assert apply_overrides(load_config(BASE), workers="0003", extra_args=None).workers == 3
    assert problems(BASE + "workers: 99999999999999999999999\n") == [
        "train.yaml:4: workers: must be at most 512, got 99999999999999999...; "
        "fix: use a whole number from 1 to 512, e.g. workers: 2"
    ]
    assert problems(BASE + "workers: !!int abc\n") == [
        "train.yaml:4: workers: 'abc' cannot be read as a whole number; "
        "fix: write a whole number or remove the !!int tag"
    ]


def test_workers_override_respects_elastic_bounds() -> None:
    config = load_config(BASE + "workers: 2\nelastic: {min_workers: 2, max_workers: 4}\n")
    assert apply_overrides(config, workers="4", extra_args=None).workers == 4
    with pytest.raises(ConfigError) as caught:
        apply_overrides(config, workers="5", extra_args=None)
    assert caught.value.lines() == [
        "CI_RUNNER_WORKERS: must be from 2 to 4 (elastic.min_workers to elastic.max_workers), "
        "got 5; fix: set CI_RUNNER_WORKERS to a number from 2 to 4"
    ]


# ---------------------------------------------------------------------------------------------
# outputs placeholders.


def test_expand_outputs() -> None:
    assert (
        expand_outputs(
            "s3://models/{project}/{sha}/{job}/{{x}}/",
            project="group/proj",
            sha="0123abcd",
            job="simple-ml-0123abcd-42",
        )
        == "s3://models/group/proj/0123abcd/simple-ml-0123abcd-42/{x}/"
    )


def test_expand_outputs_inserts_values_literally() -> None:
    assert expand_outputs("{job}", project="p", sha="s", job="{sha}") == "{sha}"


def test_expand_outputs_refuses_what_validation_refuses() -> None:
    with pytest.raises(ValueError, match="unknown placeholder in outputs: 'branch'"):
        expand_outputs("s3://m/{branch}", project="p", sha="s", job="j")


# ---------------------------------------------------------------------------------------------
# The reference documentation.


def test_committed_reference_matches_the_schema() -> None:
    assert DOC.read_text(encoding="utf-8") == schema_markdown(), (
        "docs/train-yaml.md is out of date: run .venv/bin/python -m ci_runner.spec.schema "
        "> docs/train-yaml.md"
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


# ---------------------------------------------------------------------------------------------
# Fuzzing (issue 8 scales these up).

FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.lists(st.text(max_size=10), max_size=3),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)


def _mutations() -> st.SearchStrategy[str]:
    keys = [spec.key for spec in SCHEMA.fields] + ["kubernetes.tolerations", "resources.gpu"]
    return st.sampled_from(keys)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations(), FIELD_VALUES)
def test_mutated_valid_document_loads_or_fails_cleanly(path: str, value: object) -> None:
    document = yaml.safe_load(EXAMPLE)
    *parents, last = path.split(".")
    target = document
    for parent in parents:
        target = target[parent]
    target[last] = value
    text = yaml.safe_dump(document, allow_unicode=True)
    try:
        config = load_config(text)
    except ConfigError as error:
        assert error.lines()
        assert all("\n" not in line and "; fix: " in line for line in error.lines())
    else:
        assert isinstance(config, TrainConfig)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.binary()))
def test_arbitrary_input_loads_or_fails_with_config_error(data: str | bytes) -> None:
    try:
        load_config(data)
    except ConfigError as error:
        assert error.lines() and all("\n" not in line for line in error.lines())
