"""A fake GitLab REST API v4 on loopback that the real python-gitlab talks to over real HTTP.

Only what ci-runner uses, answered the way GitLab answers it (status codes, JSON shapes, error
bodies, pagination headers and ``Link``), each rule beside the code that keeps it, with the
gitlabhq file it comes from:

- :mod:`~testing.fake_gitlab.server`: :class:`FakeGitLab`, its HTTP server, injected faults and
  recorded requests; :mod:`~testing.fake_gitlab.state`: what tests put in it;
  :mod:`~testing.fake_gitlab.model`: the data;
- :mod:`~testing.fake_gitlab.routes`: routing, and the list of route areas;
  :mod:`~testing.fake_gitlab.auth`: the token; :mod:`~testing.fake_gitlab.paging`: pagination;
  :mod:`~testing.fake_gitlab.responses`: answers and errors;
- the API, one module per area: :mod:`~testing.fake_gitlab.users`,
  :mod:`~testing.fake_gitlab.projects`, :mod:`~testing.fake_gitlab.merge_requests` (and their
  notes), :mod:`~testing.fake_gitlab.commits`, :mod:`~testing.fake_gitlab.discussions`,
  :mod:`~testing.fake_gitlab.pipelines` (and their jobs), :mod:`~testing.fake_gitlab.artifacts`;
  :mod:`~testing.fake_gitlab.notes`: what every kind of note shares;
  :mod:`~testing.fake_gitlab.quick_actions`: GitLab's quick-action extractor, ported;
- for tests: :mod:`~testing.fake_gitlab.accounts` (the identities),
  :mod:`~testing.fake_gitlab.retry_waits` (retry waits recorded, not slept),
  :mod:`~testing.fake_gitlab.mermaid` (GitLab's Mermaid auto-draw rule); ``python -m
  testing.fake_gitlab`` serves it as a command.

Usage::

    with FakeGitLab() as server:
        server.add_token("secret", server.add_user("ci-bot"))
        project = server.add_project("group/proj")
        gl = gitlab.Gitlab(server.url, private_token="secret")
"""
