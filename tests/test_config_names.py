"""ci_runner.config.names: the rules for names, through train.yaml and on their own."""

from __future__ import annotations

import pytest

from ci_runner.config.names import (
    closest,
    env_name,
    ip_address,
    k8s_name,
    label_key,
    label_value,
    metric_name,
    name_prefix,
    slugify,
)
from ci_runner.config.schema import MAX_NAME_LENGTH
from testing.config_cases import BASE, RESERVED, problems

NAME_PROBLEMS = [
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
        "secrets: [1X]",
        "train.yaml:4: secrets[0]: '1X' is not a valid environment variable name; fix: use "
        "letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
    ),
    (
        "secrets: [DATA_URI]",
        "train.yaml:4: secrets[0]: DATA_URI is set by ci-runner for every rank; fix: "
        f"choose another name ({RESERVED} are reserved)",
    ),
    (
        "metrics: {'1loss': {pattern: '(?P<value>x)'}}",
        "train.yaml:4: metrics.1loss: '1loss' is not a valid metric name; fix: use at most "
        "63 letters, digits and '_', not starting with a digit, e.g. train_loss",
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
        "kubernetes: {node_selector: {'bad key!': x}}",
        "train.yaml:4: kubernetes.node_selector['bad key!']: must be a Kubernetes label "
        "key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or "
        "'.'), got 'bad key!'; fix: write a key such as gpu or nvidia.com/gpu",
    ),
    (
        "kubernetes: {service_account: Trainer}",
        "train.yaml:4: kubernetes.service_account: must be a Kubernetes object name "
        "(lowercase letters, digits, '-' and '.', starting and ending with a letter or "
        "digit, at most 253 characters), got 'Trainer'; fix: write e.g. trainer",
    ),
    (
        "kubernetes: {queue: 'my queue'}",
        "train.yaml:4: kubernetes.queue: must be a Kubernetes object name (lowercase "
        "letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
        "253 characters), got 'my queue'; fix: write e.g. my-queue",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), NAME_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(BASE + snippet + "\n") == [expected]


def test_slugify() -> None:
    assert slugify("Simple_ML v2", MAX_NAME_LENGTH) == "simple-ml-v2"
    assert slugify("2nd run", MAX_NAME_LENGTH) == "nd-run"
    assert slugify("---", MAX_NAME_LENGTH) == "job"
    assert slugify("a" * 30 + "-b", MAX_NAME_LENGTH) == "a" * 24
    assert slugify("abc" * 8 + "-xyz", MAX_NAME_LENGTH) == "abc" * 8


# ---------------------------------------------------------------------------------------------
# The rules on their own: the limits Kubernetes sets, exactly at and one past each.


def test_kubernetes_names_at_their_limits() -> None:
    label = k8s_name("namespace", subdomain=False)
    subdomain = k8s_name("object", subdomain=True)
    assert label("a" * 63) is None
    assert label("a" * 64) is not None
    assert label("a.b") == (
        "must be a Kubernetes namespace name (lowercase letters, digits and '-', starting and "
        "ending with a letter or digit, at most 63 characters), got 'a.b'",
        "write e.g. a-b",
    )
    assert subdomain("a.b") is None
    assert subdomain(".".join(["a" * 63] * 4)[:253]) is None
    assert subdomain("a" * 254) is not None
    assert subdomain("0-x") is None  # DNS-1123 allows a leading digit


def test_job_name_is_a_dns_1035_label_of_the_given_length() -> None:
    rule = name_prefix(5)
    assert rule("ab-1") is None
    assert rule("1ab") == (
        "must be lowercase letters, digits and '-', start with a letter and end with a letter "
        "or digit, got '1ab'",
        "write name: ab",
    )
    assert rule("abcdef") == (
        "must be at most 5 characters (it names the job's pods), got 6",
        "shorten it, e.g. name: abcde",
    )


def test_label_keys_and_values() -> None:
    assert label_key("nvidia.com/gpu") is None
    assert label_key("gpu") is None
    assert label_key("a" * 63) is None
    assert label_key("a" * 64) is not None
    assert label_key("/gpu") is not None
    assert label_key("Bad_Prefix/gpu") is not None
    assert label_value("") is None
    assert label_value("a_b.c-d") is None
    assert label_value("-a") is not None


def test_env_names_refuse_the_reserved_ones() -> None:
    rule = env_name(("DATA_URI",), "CI_X_")
    assert rule("_lower_1") is None
    assert rule("CI_X") is None
    assert rule("CI_X_Y") == (
        "CI_X_Y is set by ci-runner for every rank",
        "choose another name (DATA_URI and CI_X_* are reserved)",
    )
    assert rule("A-B") == (
        "'A-B' is not a valid environment variable name",
        "use letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
    )


def test_metric_names_and_ip_addresses() -> None:
    assert metric_name("a" * 63) is None
    assert metric_name("a" * 64) is not None
    assert ip_address("fd00::10") is None
    assert ip_address("10.96.0.10") is None
    assert ip_address("10.96.0") == (
        "must be an IP address, got '10.96.0'",
        "write e.g. 10.96.0.10",
    )


def test_closest_prefers_another_case_then_a_near_spelling() -> None:
    assert closest("MAX", ["min", "max"]) == "max"
    assert closest("namspace", ["name", "namespace"]) == "namespace"
    assert closest("zzz", ["namespace"]) is None
