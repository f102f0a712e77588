"""GitLab's offset pagination, as python-gitlab follows it.

``Link`` headers are built from GitLab's configured external URL, not from the request's Host
(``FakeGitLab(external_url=...)``): python-gitlab follows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

from testing.fake_gitlab.responses import JSONValue, Response, json_response

DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 100


class Pager:
    """GitLab's offset pagination: ``page``/``per_page`` in, ``X-*`` headers and ``Link`` out
    (links built from ``base``: GitLab's external URL)."""

    def __init__(self, base: str, path: str, query: Mapping[str, str]) -> None:
        self.base = base
        self.path = path
        self.query = dict(query)

    def query_list(self, name: str) -> list[str]:
        value = self.query.get(name)
        return [value] if value else []

    def _number(self, name: str, default: int) -> int:
        raw = self.query.get(name, "")
        return int(raw) if raw.isdigit() and int(raw) > 0 else default

    def _link(self, page: int, per_page: int) -> str:
        query = {**self.query, "page": str(page), "per_page": str(per_page)}
        return f"{self.base}{self.path}?{urlencode(query)}"

    def respond(self, items: Sequence[JSONValue]) -> Response:
        per_page = min(self._number("per_page", DEFAULT_PER_PAGE), MAX_PER_PAGE)
        page = self._number("page", 1)
        total_pages = max(1, -(-len(items) // per_page))
        chunk = list(items[(page - 1) * per_page : page * per_page])
        links = []
        if page > 1:
            links.append(f'<{self._link(page - 1, per_page)}>; rel="prev"')
        if page < total_pages:
            links.append(f'<{self._link(page + 1, per_page)}>; rel="next"')
        links.append(f'<{self._link(1, per_page)}>; rel="first"')
        links.append(f'<{self._link(total_pages, per_page)}>; rel="last"')
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(len(items)),
            "X-Total-Pages": str(total_pages),
            "X-Next-Page": str(page + 1) if page < total_pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "Link": ", ".join(links),
        }
        return json_response(200, chunk, headers)
