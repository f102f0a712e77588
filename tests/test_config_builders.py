"""ci_runner.config.builders: the checks across several fields, and the defaults they fill in."""

from __future__ import annotations

import pytest

from ci_runner.config.schema import load_config
from testing.config_cases import BASE, problems

CROSS_FIELD_PROBLEMS = [
    (
        "elastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to "
        "elastic.max_workers), got 1; fix: set workers to how many workers to start with, "
        "from 2 to 4",
    ),
    (
        "workers: 5\nelastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to "
        "elastic.max_workers), got 5; fix: set workers to how many workers to start with, "
        "from 2 to 4",
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
]


@pytest.mark.parametrize(("snippet", "expected"), CROSS_FIELD_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(BASE + snippet + "\n") == [expected]


@pytest.mark.parametrize(
    ("resources", "slots"),
    [("{gpu: 4}", 4), ("{gpu: 0}", 1), ("{cpu: 2}", 1)],
)
def test_slots_per_worker_defaults_to_gpus(resources: str, slots: int) -> None:
    assert load_config(BASE + f"resources: {resources}\n").slots_per_worker == slots


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
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to elastic.max_workers), "
        "got 9; fix: set workers to how many workers to start with, from 2 to 4",
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
