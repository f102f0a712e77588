"""Who may call a scripted node's kubelet HTTPS API, as the real kubelet decides it with
``--anonymous-auth=false``, ``--client-ca-file`` and ``--authorization-mode=Webhook``:

- authentication by the client certificate (``pkg/kubelet/server/server.go`` InstallAuthFilter;
  the x509 authenticator's CommonNameUserConversion: user = CN, groups = O, plus
  ``system:authenticated``); no certificate: 401 ``Unauthorized``;
- authorization by a SubjectAccessReview to the API server as the node's own user
  (``k8s.io/apiserver`` plugin/pkg/authorizer/webhook/webhook.go Authorize) with the attributes of
  ``pkg/kubelet/server/auth.go`` GetRequestAttributes: ``nodes/<subresource>`` named after the
  node, the verb from the HTTP method; a refusal: 403 with the kubelet's text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from testing.kube_api import Api, ApiFailure

JSON = dict[str, Any]
AUTHENTICATED = "system:authenticated"
# auth.go: the verb of each HTTP method.
VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# auth.go: the subresource of each path prefix; everything else (/containerLogs, /exec, /run...)
# is "proxy". KubeletFineGrainedAuthz adds nothing for the paths served here.
SUBRESOURCES = (
    ("/stats", "stats"),
    ("/metrics", "metrics"),
    ("/logs", "log"),
    ("/checkpoint", "checkpoint"),
)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]


class Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def user_of(certificate: JSON | None) -> User:
    """The user a verified client certificate (``ssl`` getpeercert's dict) names; 401 without."""
    if not certificate:
        raise Refused(401, "Unauthorized")
    fields = [pair for rdn in certificate.get("subject", ()) for pair in rdn]
    names = [value for key, value in fields if key == "commonName"]
    if not names:
        raise Refused(401, "Unauthorized")
    groups = tuple(value for key, value in fields if key == "organizationName")
    return User(names[0], (*groups, AUTHENTICATED))


def subresource_of(path: str) -> str:
    """auth.go isSubpath: the path itself or below it."""
    for prefix, subresource in SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return subresource
    return "proxy"


def authorize(api: Api, node: str, user: User, method: str, path: str) -> None:
    """Ask the API server; raise :class:`Refused` (403) unless it allows the request."""
    verb = VERBS.get(method, "")
    subresource = subresource_of(path)
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": {
                "verb": verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": subresource,
                "name": node,
            },
        },
    }
    try:
        answer = api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review) or {}
    except (ApiFailure, requests.RequestException) as err:  # server.go: a 500 with this text
        raise Refused(
            500,
            f"Authorization error (user={user.name}, verb={verb}, resource=nodes, "
            f"subresource={subresource})",
        ) from err
    if not (answer.get("status") or {}).get("allowed"):
        raise Refused(
            403,
            f"Forbidden (user={user.name}, verb={verb}, resource=nodes, "
            f"subresource(s)=[{subresource}])\n",
        )
