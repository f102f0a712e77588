"""ci_runner.http_policy: one retry policy and one Retry-After reader for both HTTP clients."""

from __future__ import annotations

import math
from dataclasses import astuple
from datetime import datetime, timezone

import pytest

from ci_runner.http_policy import (
    GITLAB_BUDGET,
    GITLAB_BUDGET_VARIABLE,
    GITLAB_RETRY,
    KUBERNETES_RETRY,
    TRACKING_BUDGET,
    RetryPolicy,
    budget_seconds,
    parse_retry_after,
)
from ci_runner.settings import read_settings

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 12 ", 12.0),
        ("Thu, 01 Jan 2026 12:00:30 GMT", 30.0),  # an HTTP date, 30 s from now
        ("Thu, 01 Jan 2026 11:59:00 GMT", 0.0),  # a date already past
        (None, None),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("1.5", None),  # delta-seconds are whole (RFC 9110 10.2.3)
    ],
)
def test_retry_after_is_read_in_seconds_or_as_an_http_date(
    header: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(header, NOW) == seconds


def test_delay_doubles_up_to_the_cap_and_retry_after_wins_up_to_its_own_cap() -> None:
    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=3.0, max_retry_after=60.0)
    assert [policy.delay(retry) for retry in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(4, retry_after=0.0) == 0.0
    assert policy.delay(0, retry_after=3600.0) == 60.0


def test_each_client_has_its_policy() -> None:
    assert astuple(KUBERNETES_RETRY) == (6, 1.0, 30.0, 300.0)
    assert astuple(GITLAB_RETRY) == (4, 0.5, 8.0, math.inf)
    assert [GITLAB_RETRY.delay(retry) for retry in range(5)] == [0.5, 1.0, 2.0, 4.0, 8.0]


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("", 30.0),
        ("5", 5.0),
        (" 2.5 ", 2.5),
        ("0", 30.0),
        ("-3", 30.0),
        ("inf", 30.0),
        ("nan", 30.0),
        ("x", 30.0),
    ],
)
def test_a_time_budget_is_the_variable_else_the_default(raw: str, seconds: float) -> None:
    assert read_settings({"CI_RUNNER_TRACKING_TIMEOUT": raw}).tracking_budget == seconds


def test_each_service_has_its_budget_variable_and_default() -> None:
    settings = read_settings({GITLAB_BUDGET_VARIABLE: "7"})
    assert (settings.gitlab_budget, settings.tracking_budget) == (7.0, TRACKING_BUDGET)
    assert budget_seconds(None, GITLAB_BUDGET) == GITLAB_BUDGET
    assert (GITLAB_BUDGET_VARIABLE, GITLAB_BUDGET) == ("CI_RUNNER_GITLAB_TIMEOUT", 20.0)
