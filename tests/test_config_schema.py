"""ci_runner.config.schema: train.yaml → TrainConfig, every problem in one run in line order,
overrides from pipeline variables, the outputs placeholders."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, get_type_hints

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner.config.engine import Kind, ListOf, MapOf, Record
from ci_runner.config.schema import MAX_METRICS, SCHEMA, load_config
from ci_runner.config.types import (
    ContainerResources,
    DnsConfig,
    Elastic,
    KubernetesOptions,
    LauncherPlacement,
    MetricSpec,
    Resources,
    Toleration,
    TrackingSpec,
    TrainConfig,
)
from ci_runner.errors import ConfigError
from testing.reference_schema import EXAMPLE

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
from testing.config_cases import BASE, minimal, problems
from testing.paths import example_configs

REPO_ROOT = Path(__file__).resolve().parent.parent

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
        "  keep_finished: 30m\n"
        "  setup_timeout: 20m\n"
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
            keep_finished=1800,
            setup_timeout=1200,
            unschedulable_timeout=90,
        ),
    )


COMPLETE = r"""name: full-job
image: registry.example.com/ml/horovod:1
command: [python, train.py, --epochs, 3]
workers: 3
slots_per_worker: 2
resources:
  {gpu: 2, cpu: 1500m, memory: 16Gi, setup: {cpu: 2, memory: 3Gi}, launcher: {memory: 256Mi},
   shm: 4Gi, disk: 40Gi}
requirements: ml/requirements.txt
env: {Z_LAST: "1", A_FIRST: on}
secrets: [WANDB_API_KEY, HF_TOKEN]
data: file:///srv/data/
outputs: s3://models/{project}/{job}/
metrics:
  accuracy: {pattern: 'step (?P<step>\d+) acc (?P<value>[0-9.]+)', goal: max}
timeout: 1d
elastic: {min_workers: 2, max_workers: 6}
kubernetes:
  context: my-group/k8s-agents:gpu-cluster
  namespace: ml-training
  tolerations:
    - {key: nvidia.com/gpu, operator: Equal, value: present, effect: NoExecute,
       toleration_seconds: 30}
  node_selector: {zone: b, gpu-type: a100}
  dns_config:
    nameservers: [10.96.0.10, "fd00::10"]
    searches: [svc.cluster.local]
    options: [{name: ndots, value: 2}, {name: edns0}]
  service_account: trainer
  priority_class: high-priority
  image_pull_secrets: [registry-a, registry-b]
  queue: training
  pip_cache_pvc: pip-cache
  pip_cache_access_mode: ReadWriteMany
  cluster_domain: k8s.example.com
  ssh_port: 2222
  run_as_user: 1000
  launcher:
    node_selector: {pool: cpu}
    tolerations: [{key: spot, operator: Exists}]
    affinity: {podAntiAffinity: {}}
  ttl_seconds_after_finished: 60
  backoff_limit: 1
  keep_finished: 1d
  setup_timeout: 1h
  unschedulable_timeout: 5m
  on_preemption: fail
tracking:
  server: gitlab
  experiment: diabetes
  per_rank: true
  model: diabetes-regressor
  ranks_log: true
"""

COMPLETE_CONFIG = TrainConfig(
    name="full-job",
    image="registry.example.com/ml/horovod:1",
    command=("python", "train.py", "--epochs", "3"),
    workers=3,
    slots_per_worker=2,
    resources=Resources(
        gpu=2,
        cpu="1500m",
        memory="16Gi",
        setup=ContainerResources(cpu="2", memory="3Gi"),
        launcher=ContainerResources(cpu="500m", memory="256Mi"),
        shm="4Gi",
        disk="40Gi",
    ),
    requirements="ml/requirements.txt",
    env=(("A_FIRST", "on"), ("Z_LAST", "1")),
    secrets=("WANDB_API_KEY", "HF_TOKEN"),
    data="file:///srv/data/",
    outputs="s3://models/{project}/{job}/",
    metrics=(
        MetricSpec("accuracy", re.compile(r"step (?P<step>\d+) acc (?P<value>[0-9.]+)"), "max"),
    ),
    timeout=86400,
    elastic=Elastic(2, 6),
    kubernetes=KubernetesOptions(
        context="my-group/k8s-agents:gpu-cluster",
        namespace="ml-training",
        tolerations=(Toleration("nvidia.com/gpu", "Equal", "present", "NoExecute", 30),),
        node_selector=(("gpu-type", "a100"), ("zone", "b")),
        dns_config=DnsConfig(
            nameservers=("10.96.0.10", "fd00::10"),
            searches=("svc.cluster.local",),
            options=(("ndots", "2"), ("edns0", None)),
        ),
        service_account="trainer",
        priority_class="high-priority",
        image_pull_secrets=("registry-a", "registry-b"),
        queue="training",
        pip_cache_pvc="pip-cache",
        pip_cache_access_mode="ReadWriteMany",
        cluster_domain="k8s.example.com",
        ssh_port=2222,
        run_as_user=1000,
        launcher=LauncherPlacement(
            node_selector=(("pool", "cpu"),),
            tolerations=(Toleration(key="spot", operator="Exists"),),
            affinity='{"podAntiAffinity": {}}',
        ),
        ttl_seconds_after_finished=60,
        backoff_limit=1,
        keep_finished=86400,
        setup_timeout=3600,
        unschedulable_timeout=300,
        on_preemption="fail",
    ),
    tracking=TrackingSpec(
        "gitlab",
        "diabetes",
        True,
        "diabetes-regressor",
        ranks_log=True,
        ranks_log_line=COMPLETE.splitlines().index("  ranks_log: true") + 1,
    ),
    source_file="ml/train.yaml",
)


def _kept_defaults(instance: DataclassInstance) -> list[str]:
    """The fields of a dataclass instance that still hold their defaults."""
    kept: list[str] = []
    for field in dataclasses.fields(instance):
        if not field.compare:  # where it was written (TrainConfig.lines), not what it says
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            continue
        if getattr(instance, field.name) == default:
            kept.append(field.name)
    return kept


def test_a_complete_file_builds_exactly_this_config() -> None:
    # Every field is set away from its default, so a field the builders dropped or mixed up
    # shows here; a field added to the dataclasses without a line in COMPLETE fails the first
    # assert. But distributed: torchrun refuses elastic and kubernetes.queue, which COMPLETE
    # sets, and Kueue's fields exclude queue: test_a_complete_torchrun_file_builds_exactly_this_
    # config sets those.
    assert _kept_defaults(COMPLETE_CONFIG) == ["distributed"]
    assert _kept_defaults(COMPLETE_CONFIG.kubernetes) == [
        "local_queue",
        "workload_priority_class",
        "queue_timeout",
    ]
    for instance in (
        COMPLETE_CONFIG.resources,
        COMPLETE_CONFIG.tracking,
        COMPLETE_CONFIG.kubernetes.launcher,
    ):
        assert _kept_defaults(instance) == []
    config = load_config(COMPLETE, "ml/train.yaml")
    for field in dataclasses.fields(TrainConfig):
        if field.compare:
            assert getattr(config, field.name) == getattr(COMPLETE_CONFIG, field.name), field.name
    assert config == COMPLETE_CONFIG
    lines = COMPLETE.splitlines()
    assert (config.lines["secrets[1]"], config.lines["kubernetes.pip_cache_pvc"]) == (
        lines.index("secrets: [WANDB_API_KEY, HF_TOKEN]") + 1,
        lines.index("  pip_cache_pvc: pip-cache") + 1,
    )


def test_a_complete_torchrun_file_builds_exactly_this_config() -> None:
    # COMPLETE without what torchrun refuses (elastic, kubernetes.queue), saying torchrun, and
    # waiting in Kueue's queue instead.
    text = COMPLETE.replace(
        "elastic: {min_workers: 2, max_workers: 6}\n", "distributed: torchrun\n"
    )
    kueue = "  local_queue: team-a\n  workload_priority_class: low\n  queue_timeout: 2h\n"
    text = text.replace("  queue: training\n", kueue)
    assert text.count("distributed: torchrun") == 1 and "  queue:" not in text
    config = load_config(text, "ml/train.yaml")
    kubernetes = dataclasses.replace(
        COMPLETE_CONFIG.kubernetes,
        queue=None,
        local_queue="team-a",
        workload_priority_class="low",
        queue_timeout=7200,
    )
    expected = dataclasses.replace(
        COMPLETE_CONFIG, distributed="torchrun", elastic=None, kubernetes=kubernetes
    )
    assert config == expected  # (tracking's ranks_log_line is not compared)


def _records(kind: Kind[object]) -> list[Record[dict[str, object], object]]:
    if isinstance(kind, Record):
        return [kind, *(record for spec in kind.fields for record in _records(spec.kind))]
    if isinstance(kind, ListOf):
        return _records(kind.item)
    if isinstance(kind, MapOf):
        return _records(kind.value)
    return []


def test_each_record_states_the_types_of_exactly_its_fields() -> None:
    # The engine trusts each builder's TypedDict to name the record's fields (engine.Record).
    records = _records(SCHEMA)
    assert len(records) == 13
    for record in records:
        values = get_type_hints(record.build)["values"]
        assert set(get_type_hints(values)) == {spec.key for spec in record.fields}, values


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


def test_examples_in_the_repository_are_valid() -> None:
    examples = example_configs()
    assert [p.name for p in examples if p.parent.name == "simple_ml"] == [
        "train-ddp.yaml",
        "train.yaml",
    ]
    for path in examples:
        load_config(path.read_bytes(), path.relative_to(REPO_ROOT).as_posix())


def _metrics(count: int, pattern: str = "(?P<value>x)") -> str:
    return "metrics:\n" + "".join(f"  m{i}: {{pattern: '{pattern}'}}\n" for i in range(count))


def test_at_most_32_metrics_refused_before_any_pattern_is_compiled() -> None:
    assert MAX_METRICS == 32
    assert len(load_config(BASE + _metrics(32)).metrics) == 32
    assert problems(BASE + _metrics(2400, pattern="(?P<value>x")) == [
        "train.yaml:5: metrics: may have at most 32 entries, got 2400; fix: remove 2368"
    ]


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


# ---------------------------------------------------------------------------------------------
# Fuzzing (tests/test_hardening_fuzz.py scales these up).

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
        load_config(text)
    except ConfigError as error:
        assert error.lines()
        assert all("\n" not in line and "; fix: " in line for line in error.lines())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.binary()))
def test_arbitrary_input_loads_or_fails_with_config_error(data: str | bytes) -> None:
    try:
        load_config(data)
    except ConfigError as error:
        assert error.lines() and all("\n" not in line for line in error.lines())


def test_a_model_may_be_named_like_the_experiment() -> None:
    # GitLab keeps a model's runs in the experiment "[model]<name>" (app/models/ml/model.rb,
    # prefixed_experiment), so a model and an experiment of one name do not meet.
    text = BASE + "tracking: {server: gitlab, experiment: toy, model: toy}\n"
    assert load_config(text).tracking == TrackingSpec("gitlab", "toy", False, "toy")


def test_setup_and_launcher_resources_are_none_or_a_mapping() -> None:
    assert load_config(BASE + "resources: {setup: none, launcher: none}\n").resources == Resources(
        setup=ContainerResources(), launcher=ContainerResources()
    )
    assert problems(BASE + "resources:\n  setup: nothing\n  launcher: {cpu: 0}\n") == [
        "train.yaml:5: resources.setup: must be none or a mapping such as {cpu: 500m, memory: "
        "1Gi}, got the string 'nothing'; fix: write none or a mapping such as {cpu: 500m, "
        "memory: 1Gi}, e.g. setup: {cpu: 2, memory: 4Gi}",
        "train.yaml:6: resources.launcher.cpu: must be more than 0, got '0'; fix: request a "
        "positive amount, e.g. cpu: 500m",
    ]


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ("{}", "1Gi"),  # no memory: the LimitRange decides the limit
        ("{memory: 8Gi}", "4Gi"),
        ("{memory: 3G}", "1430Mi"),  # whole MiB
        ("{memory: 40Gi}", "16Gi"),  # at most SHM_MAX
        ("{memory: 8Gi, shm: 8Gi}", "8Gi"),
        ("{shm: 64Mi}", "64Mi"),
    ],
)
def test_shm_defaults_to_half_the_memory_at_most_16gi(resources: str, expected: str) -> None:
    assert load_config(BASE + f"resources: {resources}\n").resources.shm_size == expected


def test_shm_may_not_be_more_than_the_memory() -> None:
    assert problems(BASE + "resources:\n  memory: 8Gi\n  shm: 9Gi\n") == [
        "train.yaml:6: resources.shm: 9Gi is more than the worker's memory (8Gi): what ranks "
        "write to /dev/shm counts against it; fix: set shm to at most 8Gi, or raise "
        "resources.memory",
    ]
