"""ci_runner.config.engine: each kind's checks, worded exactly, through train.yaml's schema and on
records of their own."""

from __future__ import annotations

import pytest

from ci_runner.config.engine import INVALID, At, Context, Field, Invalid, Record, check, homes
from ci_runner.config.scalars import Int, Str
from ci_runner.config.yamlsource import YScalar, parse
from testing.config_cases import BASE, problems

KIND_PROBLEMS = [
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
        "secrets: [A, A]",
        "train.yaml:4: secrets[1]: repeats 'A' (also item 0); fix: list each one once",
    ),
    (
        "secrets: [5]",
        "train.yaml:4: secrets[0]: must be a string, got the number 5; fix: write a "
        "string, e.g. secrets: [WANDB_API_KEY]",
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
        "metrics: {loss: {pattern: '(?P<value>x)', patern: y}}",
        "train.yaml:4: metrics.loss.patern: unknown key; fix: did you mean 'pattern'?",
    ),
    (
        "elastic: {min_workers: 1}",
        "train.yaml:4: elastic.max_workers: is required; fix: add it, e.g. max_workers: 4",
    ),
    (
        "elastic: {min_workers: 0, max_workers: 4}",
        "train.yaml:4: elastic.min_workers: must be at least 1, got 0; fix: use a whole "
        "number from 1 to 512, e.g. min_workers: 1",
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
        "kubernetes: {tolerations: [{key: gpu, toleration_seconds: -1, effect: NoExecute}]}",
        "train.yaml:4: kubernetes.tolerations[0].toleration_seconds: must be at least 0, "
        "got -1; fix: use a whole number from 0 to 2147483647, e.g. toleration_seconds: "
        "300",
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
        "kubernetes: {pip_cache_pvc: ''}",
        "train.yaml:4: kubernetes.pip_cache_pvc: must not be empty; fix: write a value, "
        "e.g. pip_cache_pvc: pip-cache",
    ),
    (
        "kubernetes: {ssh_port: 0}",
        "train.yaml:4: kubernetes.ssh_port: must be at least 1, got 0; fix: use a whole number "
        "from 1 to 65535, e.g. ssh_port: 2222",
    ),
    (
        "kubernetes: {ssh_port: 70000}",
        "train.yaml:4: kubernetes.ssh_port: must be at most 65535, got 70000; fix: use a whole "
        "number from 1 to 65535, e.g. ssh_port: 2222",
    ),
    (
        "kubernetes: {cluster_domain: Cluster_Local}",
        "train.yaml:4: kubernetes.cluster_domain: must be a Kubernetes cluster domain name "
        "(lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, "
        "at most 253 characters), got 'Cluster_Local'; fix: write e.g. cluster-local",
    ),
    (
        "kubernetes: {pip_cache_access_mode: ReadWriteonce}",
        "train.yaml:4: kubernetes.pip_cache_access_mode: must be one of ReadWriteOnce, "
        "ReadWriteOncePod, ReadWriteMany, got 'ReadWriteonce'; fix: did you mean "
        "'ReadWriteOnce'?",
    ),
    (
        "kubernetes: {on_preemption: Fail}",
        "train.yaml:4: kubernetes.on_preemption: must be one of wait, fail, got 'Fail'; fix: "
        "did you mean 'fail'?",
    ),
    (
        "kubernetes: {on_preemption: resume}",
        "train.yaml:4: kubernetes.on_preemption: must be one of wait, fail, got 'resume'; fix: "
        "use one of wait, fail",
    ),
    (
        "kubernetes: {on_preemption: true}",
        "train.yaml:4: kubernetes.on_preemption: must be one of wait, fail, got the boolean "
        "true; fix: write one of wait, fail, e.g. on_preemption: fail",
    ),
    (
        "workers: 2\nkubernetes: {pip_cache_pvc: cache}",
        "train.yaml:5: kubernetes.pip_cache_pvc: a ReadWriteOnce claim can serve one worker, "
        "not 2: the other workers would wait for it for ever (Multi-Attach); fix: give the "
        "claim access mode ReadWriteMany and set kubernetes.pip_cache_access_mode: "
        "ReadWriteMany, or remove pip_cache_pvc (each worker then caches in its own emptyDir)",
    ),
    (
        "elastic: {min_workers: 1, max_workers: 3}\n"
        "kubernetes: {pip_cache_pvc: cache, pip_cache_access_mode: ReadWriteOncePod}",
        "train.yaml:5: kubernetes.pip_cache_pvc: a ReadWriteOncePod claim can serve one "
        "worker, not 3: the other workers would wait for it for ever (Multi-Attach); fix: give "
        "the claim access mode ReadWriteMany and set kubernetes.pip_cache_access_mode: "
        "ReadWriteMany, or remove pip_cache_pvc (each worker then caches in its own emptyDir)",
    ),
    (
        "kubernetes: {namspace: ml}",
        "train.yaml:4: kubernetes.namspace: unknown key; fix: did you mean 'namespace'?",
    ),
    (
        "kubernetes: {zzz: 1}",
        "train.yaml:4: kubernetes.zzz: unknown key; fix: remove it; allowed keys: "
        "context, namespace, tolerations, node_selector, launcher, dns_config, service_account, "
        "priority_class, image_pull_secrets, queue, local_queue, workload_priority_class, "
        "queue_timeout, pip_cache_pvc, pip_cache_access_mode, cluster_domain, ssh_port, "
        "run_as_user, "
        "ttl_seconds_after_finished, backoff_limit, keep_finished, setup_timeout, "
        "unschedulable_timeout, on_preemption",
    ),
    (
        "foo: 1",
        "train.yaml:4: foo: unknown key; fix: remove it; allowed keys: name, image, "
        "command, distributed, workers, slots_per_worker, resources, requirements, env, "
        "secrets, data, outputs, metrics, timeout, elastic, kubernetes, tracking",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), KIND_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(BASE + snippet + "\n") == [expected]


# ---------------------------------------------------------------------------------------------
# The engine on records of its own.

Built = tuple[dict[str, object], bool, frozenset[str]]


def _run(record: Record[dict[str, object], str], text: str) -> tuple[str | Invalid, list[str]]:
    context = Context("t.yaml", homes=homes(record))
    value = record.check(parse(text, "t.yaml").root, At(context, "", "n: 3"))
    return value, [str(problem) for problem in context.problems]


def _recording_record(seen: list[Built]) -> Record[dict[str, object], str]:
    def build(values: dict[str, object], at: At, ok: bool, keys: frozenset[str]) -> str | Invalid:
        seen.append((dict(values), ok, keys))
        return "built" if ok else INVALID

    inner = Record(Field("b", Int(0), "Inner number.", "1"), build=build)
    return Record(
        Field("n", Int(1, 9), "A number.", "3", required=True),
        Field("s", Str(), "A string.", "x"),
        Field("inner", inner, "A mapping.", "{b: 1}"),
        build=build,
    )


def test_a_record_builds_from_its_checked_values() -> None:
    seen: list[Built] = []
    assert _run(_recording_record(seen), "n: 3\ns: x\n") == ("built", [])
    assert seen == [({"n": 3, "s": "x"}, True, frozenset({"n", "s"}))]


def test_a_record_builder_runs_when_a_field_is_invalid_with_what_was_valid() -> None:
    seen: list[Built] = []
    assert _run(_recording_record(seen), "s: x\nn: 10\nz: 1\n") == (
        INVALID,
        [
            "t.yaml:2: n: must be at most 9, got 10; fix: use a whole number from 1 to 9, "
            "e.g. n: 3",
            "t.yaml:3: z: unknown key; fix: remove it; allowed keys: n, s, inner",
        ],
    )
    assert seen == [({"s": "x"}, False, frozenset({"s", "n", "z"}))]


def test_a_key_of_a_nested_record_is_pointed_to_its_home() -> None:
    record = _recording_record([])
    assert homes(record) == {"n": "", "s": "", "inner": "", "b": "inner"}
    assert _run(record, "n: 3\nb: 1\ninner: {n: 2}\n") == (
        INVALID,
        [
            "t.yaml:2: b: unknown key; fix: b belongs under inner; move it there",
            "t.yaml:3: inner.n: unknown key; fix: n belongs at the top level; move it there",
        ],
    )


def test_a_value_the_yaml_reader_could_not_read_is_not_reported_twice() -> None:
    context = Context("t.yaml")
    broken = YScalar(None, "!!int abc", 1, broken=True)
    assert check(Int(0), broken, At(context, "n", "n: 1")) is INVALID
    assert context.problems == []
    assert repr(INVALID) == "INVALID"
