"""A manual pipeline's variables over train.yaml: ``CI_RUNNER_WORKERS`` (the worker count) and
``CI_RUNNER_ARGS`` (arguments appended to the command), checked like the file's values: the
worker count by the kind of ``workers`` (:data:`~ci_runner.config.schema.WORKER_COUNT`), or of
``elastic``'s bounds."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Final

from ci_runner import variables
from ci_runner.config.builders import (
    PIP_CACHE_FIX,
    elastic_range,
    pip_cache_conflict,
    pip_cache_fits,
)
from ci_runner.config.scalars import Int, number
from ci_runner.config.schema import WORKER_COUNT
from ci_runner.config.types import TrainConfig
from ci_runner.errors import ConfigError, Problem

WORKERS_VARIABLE: Final = variables.CI_RUNNER_WORKERS
ARGS_VARIABLE: Final = variables.CI_RUNNER_ARGS


def apply_overrides(
    config: TrainConfig, *, workers: str | None, extra_args: str | None
) -> TrainConfig:
    """Apply the pipeline variables CI_RUNNER_WORKERS and CI_RUNNER_ARGS (empty means unset).

    ``workers`` replaces the worker count (checked like the file's); ``extra_args`` is split like
    a shell would and appended to the command. Raises ConfigError listing every problem.
    """
    problems: list[Problem] = []
    new_workers, new_command = config.workers, config.command
    if workers is not None and workers.strip():
        checked = _worker_count(config, workers)
        if isinstance(checked, Problem):
            problems.append(checked)
        else:
            new_workers = checked
    if extra_args is not None and extra_args.strip():
        args = _extra_args(extra_args)
        if isinstance(args, Problem):
            problems.append(args)
        else:
            new_command = (*config.command, *args)
    if problems:
        raise ConfigError(problems)
    return replace(config, workers=new_workers, command=new_command)


def _worker_count(config: TrainConfig, workers: str) -> int | Problem:
    """CI_RUNNER_WORKERS as a worker count train.yaml allows, or the problem with it."""
    value = workers.strip()
    elastic = config.elastic
    kind = WORKER_COUNT if elastic is None else Int(elastic.min_workers, elastic.max_workers)
    if not value.isdigit() or not value.isascii():
        return _problem(
            WORKERS_VARIABLE,
            f"must be a whole number, got {_uncut(workers)}",
            f"set {WORKERS_VARIABLE} to a number from {WORKER_COUNT.minimum} to "
            f"{WORKER_COUNT.maximum}, e.g. 2",
        )
    # More than 6 digits is out of any bound, and int() refuses thousands of them.
    if len(value.lstrip("0")) > 6 or not kind.admits(int(value)):
        if elastic is not None:
            return _problem(
                WORKERS_VARIABLE, *elastic_range(elastic, WORKERS_VARIABLE, number(value))
            )
        low, high = kind.minimum, kind.maximum
        return _problem(
            WORKERS_VARIABLE,
            f"must be from {low} to {high}, got {number(value)}",
            f"set {WORKERS_VARIABLE} to a number from {low} to {high}",
        )
    if not pip_cache_fits(config.kubernetes, int(value)):
        return _problem(
            WORKERS_VARIABLE,
            pip_cache_conflict(config.kubernetes, int(value)),
            f"set {WORKERS_VARIABLE} to 1, or {PIP_CACHE_FIX}",
        )
    return int(value)


def _extra_args(extra_args: str) -> list[str] | Problem:
    """CI_RUNNER_ARGS split like a shell command line, or the problem with it."""
    try:
        args = shlex.split(extra_args)
    except ValueError:
        return _problem(
            ARGS_VARIABLE,
            f"has an unbalanced quote or a trailing backslash: {_uncut(extra_args)}",
            "close every quote (the value is split like a shell command line)",
        )
    if any("\x00" in arg for arg in args):
        return _problem(ARGS_VARIABLE, "must not contain a NUL character", "remove it")
    return args


def _problem(variable: str, message: str, fix: str) -> Problem:
    return Problem(variable, "", None, message, fix)


def _uncut(value: str, limit: int = 200) -> str:
    """A CI variable's value for a message: whole or not at all. A value cut short could end
    half-way through a secret the variable expanded, which the log's masker would not recognise."""
    return repr(value) if len(value) <= limit else f"a value of {len(value)} characters"
