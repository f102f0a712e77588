"""``GET /user`` and the user as GitLab's API shows it."""

from __future__ import annotations

from testing.fake_gitlab.area import Call
from testing.fake_gitlab.model import User
from testing.fake_gitlab.responses import JSONValue, Response, json_response, only


def serve(call: Call) -> Response:
    """The current user."""
    return only(call.method, "GET", lambda: json_response(200, user_json(call.user, call.base)))


def user_json(user: User, base: str) -> JSONValue:
    return {
        "id": user.id,
        "username": user.username,
        "name": user.username,
        "state": "active",
        "web_url": f"{base}/{user.username}",
    }
