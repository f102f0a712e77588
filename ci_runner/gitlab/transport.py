"""Every HTTP request ci-runner sends to GitLab, bounded: one :class:`BoundedSession` that
python-gitlab uses as its ``requests`` session (python-gitlab's own retries are turned off).

- A :class:`Budget` caps the time all GitLab work of one phase (before training, after it) may
  take; a request never waits longer than what is left, and once it is spent every request fails
  at once with :class:`BudgetExhausted`.
- :data:`~ci_runner.http_policy.GITLAB_RETRY` retries what is safe to retry: a connection that
  could not be opened (nothing was sent), 429 (rate-limited before GitLab ran anything), and for
  GET/PUT/DELETE (idempotent) also 5xx, timeouts and dropped connections. A POST that timed out
  or got a 5xx may have been executed: it is never resent here (the caller looks before creating
  again). ``Retry-After`` is honoured in seconds or as an HTTP date, else exponential backoff.

:func:`unanswered` says, in ci_runner.errors' words, why a request through it got no answer;
both clients (GitLab's and MLflow's) use it, so a failure reads the same from either.
"""

from __future__ import annotations

from typing import Any, Final

import requests
import urllib3.exceptions

from ci_runner.clock import Clock
from ci_runner.errors import Server, not_answered, out_of_time, refused
from ci_runner.http_policy import (
    GITLAB_REQUEST_TIMEOUT,
    GITLAB_RETRY,
    TRANSIENT_STATUSES,
    RetryPolicy,
    parse_retry_after,
)

IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class BudgetExhausted(requests.Timeout):
    """The phase's time for GitLab is spent: no request is sent any more."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"GitLab did not answer within {seconds:g} s")
        self.seconds = seconds


class RateLimited(requests.RequestException):
    """GitLab still answered 429 when ci-runner stopped retrying. Raised, not returned:
    python-gitlab would otherwise retry it again on its own (gitlab/client.py:754-757 and
    gitlab/utils.py:104-139 at python-gitlab v8.4.0-15-g00e38026)."""

    def __init__(self, response: requests.Response) -> None:
        super().__init__("429 Too Many Requests", response=response)


class Budget:
    """``seconds`` of GitLab work from now on ``clock``."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self._deadline = clock.monotonic() + seconds
        self.spent = False  # set when a request found it used up

    def remaining(self) -> float:
        return max(0.0, self._deadline - self.clock.monotonic())


class BoundedSession(requests.Session):
    """The one place GitLab HTTP goes through (see the module docstring)."""

    def __init__(
        self,
        budget: Budget,
        *,
        policy: RetryPolicy | None = None,
        request_timeout: float = GITLAB_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__()
        self.budget = budget
        self.policy = policy or GITLAB_RETRY
        self.request_timeout = request_timeout

    def request(
        self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any
    ) -> requests.Response:
        verb = method.decode() if isinstance(method, bytes) else method
        verb = verb.upper()
        clock = self.budget.clock
        attempt = 0
        while True:
            attempt += 1
            left = self.budget.remaining()
            if left <= 0:
                self.budget.spent = True
                raise BudgetExhausted(self.budget.seconds)
            kwargs["timeout"] = min(self.request_timeout, left)
            retry_after: str | None = None
            try:
                response = super().request(verb, url, *args, **kwargs)
            except requests.RequestException as error:
                if not self._may_retry_error(verb, error, attempt):
                    if self.budget.remaining() <= 0:
                        self.budget.spent = True
                    raise
                failure: requests.Response | requests.RequestException = error
            else:
                if not self._may_retry_status(verb, response.status_code, attempt):
                    return _checked(response)
                retry_after = response.headers.get("Retry-After")
                failure = response
            wait = self.policy.delay(attempt - 1, parse_retry_after(retry_after, clock.now()))
            if wait >= self.budget.remaining():
                self.budget.spent = True
                if isinstance(failure, requests.Response):
                    return _checked(failure)
                raise BudgetExhausted(self.budget.seconds) from failure
            if isinstance(failure, requests.Response):
                failure.close()
            clock.sleep(wait)

    def _may_retry_status(self, verb: str, status: int, attempt: int) -> bool:
        if attempt >= self.policy.attempts:
            return False
        return status == 429 or (status in TRANSIENT_STATUSES and verb in IDEMPOTENT)

    def _may_retry_error(self, verb: str, error: requests.RequestException, attempt: int) -> bool:
        if attempt >= self.policy.attempts or isinstance(error, BudgetExhausted):
            return False
        return verb in IDEMPOTENT or not_sent(error)


def _checked(response: requests.Response) -> requests.Response:
    if response.status_code == 429:
        raise RateLimited(response)
    return response


def not_sent(error: BaseException) -> bool:
    """Whether the request surely never reached GitLab (the connection could not be opened)."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    if isinstance(error, requests.ConnectionError):
        reason = error.args[0] if error.args else None
        reason = getattr(reason, "reason", reason)
        return isinstance(reason, urllib3.exceptions.NewConnectionError)
    return False


def unanswered(error: requests.RequestException, server: Server, action: str) -> str:
    """The one line for a request to ``server`` that :class:`BoundedSession` gave up on."""
    if isinstance(error, RateLimited):
        return refused(server, action, 429)
    if isinstance(error, BudgetExhausted):
        return out_of_time(server, action, error.seconds)
    return not_answered(server, action, type(error).__name__)
