"""ci_runner.config.overrides: CI_RUNNER_WORKERS and CI_RUNNER_ARGS over train.yaml."""

from __future__ import annotations

import pytest

from ci_runner.config.overrides import apply_overrides
from ci_runner.config.schema import load_config
from ci_runner.errors import ConfigError
from testing.config_cases import BASE, minimal, problems


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
        "got 5; fix: set CI_RUNNER_WORKERS to how many workers to start with, from 2 to 4"
    ]


def test_workers_override_cannot_share_a_read_write_once_pip_cache() -> None:
    config = load_config(BASE + "kubernetes: {pip_cache_pvc: cache}\n")
    assert apply_overrides(config, workers="1", extra_args=None).workers == 1
    with pytest.raises(ConfigError) as caught:
        apply_overrides(config, workers="2", extra_args=None)
    assert caught.value.lines() == [
        "CI_RUNNER_WORKERS: a ReadWriteOnce claim can serve one worker, not 2: the other "
        "workers would wait for it for ever (Multi-Attach); fix: set CI_RUNNER_WORKERS to 1, "
        "or give the claim access mode ReadWriteMany and set "
        "kubernetes.pip_cache_access_mode: ReadWriteMany, or remove pip_cache_pvc (each "
        "worker then caches in its own emptyDir)"
    ]
    shared = load_config(
        BASE + "kubernetes: {pip_cache_pvc: cache, pip_cache_access_mode: ReadWriteMany}\n"
    )
    assert apply_overrides(shared, workers="8", extra_args=None).workers == 8
