"""What can go wrong talking to the API server, as our own exceptions (no client types leak).

Each is a :class:`~ci_runner.errors.ClusterError` carrying the verb and resource refused, so the
user gets one line naming them and, for a 403, the RBAC rule to add. Code that retries looks at
the class and :attr:`KubeError.retryable`; code that gives up lets the error propagate.
"""

from __future__ import annotations

from typing import Final

from ci_runner.backends.kubernetes.admission import refusal_fix
from ci_runner.backends.kubernetes.permissions import rbac_rule
from ci_runner.backends.kubernetes.resources import Resource
from ci_runner.errors import ClusterError
from ci_runner.http_policy import TRANSIENT_STATUSES


class KubeError(ClusterError):
    """The API server refused a request (or could not be reached) after any retries."""

    def __init__(
        self,
        verb: str,
        resource: Resource,
        namespace: str,
        status: int | None,
        message: str,
        host: str = "",
        retry_after: float | None = None,
        *,
        agent_context: str = "",
    ) -> None:
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.status = status
        self.message = message
        self.host = host
        self.retry_after = retry_after
        self.agent_context = agent_context  # the GitLab agent's kubeconfig context, if through one
        super().__init__(f"{verb} {resource.label}: {status} {message}")

    def __str__(self) -> str:
        return self.explanation()

    @property
    def action(self) -> str:
        return f"{self.verb} {self.resource.label} in namespace {self.namespace}"

    @property
    def retryable(self) -> bool:
        return False

    def explanation(self) -> str:
        """The one line to show the user."""
        return f"Kubernetes answered {self.status} to {self.action}: {self.message}"


class Unreachable(KubeError):
    """No HTTP answer: connection refused or reset, DNS failure, timeout, TLS failure."""

    @property
    def retryable(self) -> bool:
        return True

    def explanation(self) -> str:
        if self.agent_context:
            return (
                f"cannot reach the Kubernetes API through the GitLab agent context "
                f"{self.agent_context} ({self.host}) to {self.action}: {self.message}; fix: the "
                "agent may not be connected: check that its pod runs in the cluster and that the "
                "agent shows as connected in its project (Operate > Kubernetes clusters)"
            )
        return (
            f"cannot reach the Kubernetes API at {self.host} to {self.action}: {self.message}; "
            "fix: check the server address in KUBECONFIG and that the CI runner can reach it"
        )


class Unauthorized(KubeError):
    def explanation(self) -> str:
        return (
            f"Kubernetes rejected ci-runner's credentials (401 Unauthorized) when trying to "
            f"{self.action}; fix: renew the token or client certificate in KUBECONFIG "
            "(or the service account token) — it is missing, wrong or expired"
        )


class Forbidden(KubeError):
    """403: RBAC (``User "..." cannot <verb> resource ...``), or admission refusing a create
    (a ResourceQuota, PodSecurity, a validating webhook: :mod:`admission` words its fix)."""

    def explanation(self) -> str:
        fix = refusal_fix(self.message, self.namespace)
        if fix:
            return (
                f"Kubernetes refused to {self.action} (403 Forbidden: {self.message}); fix: {fix}"
            )
        rule = rbac_rule(self.resource.group, self.resource.plural, self.verb)
        if self.agent_context:
            return (
                f"Kubernetes refused to {self.action} through the GitLab agent context "
                f"{self.agent_context} (403 Forbidden: {self.message}); fix: the agent's ci_access "
                f"must list this project (or its group) with access to namespace {self.namespace}, "
                f"and the identity it impersonates (access_as) needs the RBAC rule {rule} there "
                "(examples/rbac.yaml grants everything ci-runner needs)"
            )
        return (
            f"Kubernetes refused to {self.action} (403 Forbidden: {self.message}); "
            f"fix: add the RBAC rule {rule} to the Role bound to the CI job's identity "
            "(examples/rbac.yaml grants everything ci-runner needs)"
        )


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists on create, or a conflicting update."""


class Gone(KubeError):
    """410: the resourceVersion asked for is too old; list again."""


class Invalid(KubeError):
    """422: the object failed validation."""

    def explanation(self) -> str:
        return f"Kubernetes rejected the request to {self.action} as invalid: {self.message}"


class Throttled(KubeError):
    """429 Too Many Requests."""

    @property
    def retryable(self) -> bool:
        return True


class ServerError(KubeError):
    """5xx."""

    @property
    def retryable(self) -> bool:
        return self.status in TRANSIENT_STATUSES


_BY_STATUS: Final[dict[int, type[KubeError]]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: Throttled,
}


def error_class(status: int) -> type[KubeError]:
    """The exception class for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else KubeError
