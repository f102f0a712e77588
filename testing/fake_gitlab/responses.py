"""What the fake GitLab's routes answer: a response, JSON, errors raised as :class:`Reply`, and
GitLab's timestamps."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any

JSONValue = Any
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Reply(Exception):
    """Raised by a route to answer right away (errors)."""

    def __init__(
        self, status: int, payload: JSONValue, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(
    status: int, payload: JSONValue, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(status, json.dumps(payload).encode(), headers=dict(headers or {}))


def no_such_route() -> Reply:
    """GitLab's answer to a path it has no route for."""
    return Reply(404, {"error": "404 Not Found"})


def only(method: str, allowed: str, answer: Callable[[], Response]) -> Response:
    """``answer()`` when the request's ``method`` is ``allowed``, else GitLab's 405."""
    if method != allowed:
        raise Reply(405, {"error": "405 Not Allowed"})
    return answer()


def status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:  # GitLab's 52x from Cloudflare and friends have no standard phrase
        return str(status)


def timestamp(seconds: int) -> str:
    """The time ``seconds`` after the fake's epoch, as GitLab's API writes times."""
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
