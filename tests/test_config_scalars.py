"""ci_runner.config.scalars: each kind of single value's checks, worded exactly, through
train.yaml's schema (a whole number, a duration, a quantity, a command line)."""

from __future__ import annotations

import pytest

from ci_runner.config.scalars import Int
from ci_runner.config.schema import WORKER_COUNT, load_config
from testing.config_cases import BASE, BASE_WITHOUT_COMMAND, problems

SCALAR_PROBLEMS = [
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
        "resources: {cpu: 1e9999999}",
        "train.yaml:4: resources.cpu: must be at most 9223372036854775807 (2^63-1 bytes or "
        "cores, the most Kubernetes holds), got '1e9999999'; fix: request what the job needs, "
        "e.g. cpu: 4",
    ),
    (
        "resources: {memory: 99999999999999999999999Ei}",
        "train.yaml:4: resources.memory: must be at most 9223372036854775807 (2^63-1 bytes or "
        "cores, the most Kubernetes holds), got '99999999999999999999999Ei'; fix: request what "
        "the job needs, e.g. memory: 8Gi",
    ),
    (
        "resources: {disk: 8Ei}",
        "train.yaml:4: resources.disk: must be at most 9223372036854775807 (2^63-1 bytes or "
        "cores, the most Kubernetes holds), got '8Ei'; fix: request what the job needs, e.g. "
        "disk: 50Gi",
    ),
    (
        "resources: {setup: {cpu: 1e-99999999999}}",
        "train.yaml:4: resources.setup.cpu: must be at least 0.000000001 (Kubernetes rounds a "
        "smaller amount up), got '1e-99999999999'; fix: request a larger amount, e.g. cpu: 500m",
    ),
    (
        "resources: {cpu: 0.0000000001}",
        "train.yaml:4: resources.cpu: must be at least 0.000000001 (Kubernetes rounds a "
        "smaller amount up), got '0.0000000001'; fix: request a larger amount, e.g. cpu: 4",
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


@pytest.mark.parametrize(("snippet", "expected"), SCALAR_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    base = BASE_WITHOUT_COMMAND if snippet.startswith("command:") else BASE
    assert problems(base + snippet + "\n") == [expected]


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
    "quantity", ["9223372036854775807", "9223372036854775807000m", "7Ei", "1e-9", "0.000000001"]
)
def test_quantities_at_what_kubernetes_holds_are_kept_as_written(quantity: str) -> None:
    assert load_config(BASE + f"resources: {{memory: {quantity}}}\n").resources.memory == quantity


def test_a_whole_number_is_admitted_within_its_bounds() -> None:
    assert [Int(2, 4).admits(value) for value in (1, 2, 4, 5)] == [False, True, True, False]
    assert (WORKER_COUNT.minimum, WORKER_COUNT.maximum) == (1, 512)


def test_a_digit_python_counts_but_int_refuses_is_not_a_duration() -> None:
    # str.isdigit() is true of "²", "٣" and "①"; int() refuses the first and the last.
    assert problems(BASE + "timeout: '²'\n") == [
        "train.yaml:4: timeout: must be a duration such as 90m, 2h or 1h30m, got '²'; fix: write "
        "a number with units d, h, m, s in that order, e.g. timeout: 2h"
    ]
