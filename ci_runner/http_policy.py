"""How both HTTP clients (GitLab's transport, the Kubernetes API) retry and how long they wait.

One :class:`RetryPolicy` (exponential backoff, or the server's ``Retry-After`` read by
:func:`parse_retry_after` in seconds or as an HTTP date), one instance per client, and every
timeout either client applies to a request; boto3's S3 client (its own retries) gets its
timeouts here too.
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

from ci_runner import variables


@dataclass(frozen=True)
class RetryPolicy:
    """How often to try, and how long to wait before each retry."""

    attempts: int  # tries in all, the first included
    base_delay: float  # seconds before the first retry, doubled for each one after it
    max_delay: float  # the longest wait of our own
    max_retry_after: float = math.inf  # the longest wait a server's Retry-After is granted

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): what ``Retry-After`` asked
        (capped), else the backoff."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return float(min(self.base_delay * 2**retry, self.max_delay))


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP date (RFC 9110 10.2.3);
    None when absent or unreadable, 0 for a date in the past."""
    if not value or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now).total_seconds())


# 5xx answers a retry may cure, for both clients: a gateway's or proxy's (502-504), a server
# restarting (500, 503), and the 52x a CDN in front of GitLab sends when the origin fails.
TRANSIENT_STATUSES: Final = frozenset({500, 502, 503, 504, 520, 521, 522, 523, 524})


def budget_seconds(written: str | None, default: float) -> float:
    """The seconds a phase may spend on one service: its variable's value as ``written``, else
    ``default``; a value that is not a positive finite number is ignored."""
    try:
        value = float((written or "").strip())
    except ValueError:
        return default
    return value if 0 < value < math.inf else default


# -- the Kubernetes API ---------------------------------------------------------------------------

# 429, 5xx and connection errors; with MAX_RECONNECT_FAILURES, minutes of outage for a watch.
KUBERNETES_RETRY: Final = RetryPolicy(
    attempts=6, base_delay=1.0, max_delay=30.0, max_retry_after=300.0
)
KUBE_CONNECT_TIMEOUT: Final = 10.0  # seconds to open a connection to the API server
KUBE_READ_TIMEOUT: Final = 60.0  # seconds an answer (not a stream) may take between bytes
# Seconds the API server is asked to keep a watch open (``timeoutSeconds``); the read timeout
# of the watch allows that and WATCH_READ_SLACK more before the connection counts as dead.
WATCH_SECONDS: Final = 300
WATCH_READ_SLACK: Final = 30.0
# A quiet training writes nothing for long: the read timeout only makes a followed log whose
# connection died silently (a NAT forgetting it) come back; the reconnect loses nothing.
LOG_READ_TIMEOUT: Final = 300.0
# Consecutive failed reconnects of a watch or a followed log before giving up.
MAX_RECONNECT_FAILURES: Final = 12

# -- GitLab ---------------------------------------------------------------------------------------

# 429 always, and 5xx, timeouts and dropped connections for idempotent methods (the transport
# decides what may be retried); the budget bounds every wait.
GITLAB_RETRY: Final = RetryPolicy(attempts=4, base_delay=0.5, max_delay=8.0)
# Seconds of GitLab work before training, and again after it.
GITLAB_BUDGET_VARIABLE: Final = variables.CI_RUNNER_GITLAB_TIMEOUT
GITLAB_BUDGET: Final = 20.0
GITLAB_REQUEST_TIMEOUT: Final = 10.0  # seconds one request may take (capped by the budget left)

# -- MLflow (through GitLab's transport: the same retries) ---------------------------------------

# Seconds of tracking work before training, and again after it.
TRACKING_BUDGET_VARIABLE: Final = variables.CI_RUNNER_TRACKING_TIMEOUT
TRACKING_BUDGET: Final = 30.0

# -- S3 (boto3 retries on its own: ``total_max_attempts``) ---------------------------------------

S3_CONNECT_TIMEOUT: Final = 10  # seconds
S3_READ_TIMEOUT: Final = 30  # seconds
