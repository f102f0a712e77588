"""What a route area of the fake GitLab is (the routes under ``/projects/:id/`` for one part of
the API) and the request as its routes see it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from testing.fake_gitlab.auth import private_token
from testing.fake_gitlab.model import Project, User
from testing.fake_gitlab.paging import Pager
from testing.fake_gitlab.responses import Response
from testing.fake_gitlab.state import GitLabState


@dataclass(frozen=True)
class Call:
    """One request, authenticated: what a route reads."""

    state: GitLabState
    method: str
    query: Mapping[str, str]
    body: bytes
    user: User
    base: str  # GitLab's external URL: the base of every URL in an answer
    page: Pager


Authenticate = Callable[[GitLabState, str, Mapping[str, str]], User]


@dataclass(frozen=True)
class ProjectArea:
    """The routes under ``/projects/:id/`` whose (unquoted) segments after the id ``matches``
    accepts; ``serve`` answers them for the project. ``authenticate`` says who the request is
    (raising the 401 or 403), before the project is looked up."""

    matches: Callable[[list[str]], bool]
    serve: Callable[[Call, Project, list[str]], Response]
    authenticate: Authenticate = private_token
