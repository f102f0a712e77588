"""Where the comment goes, and how long GitLab may take: the project and its merge requests (or
the commit), reached through one time-bounded session per phase (before training, after it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ci_runner.clock import Clock, SystemClock
from ci_runner.console import StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.settings import Settings


@dataclass(frozen=True)
class GitLabDestination:
    """Where the comment goes: the project, and its MRs (or the commit); ``session`` carries the
    time budget of the current phase (:meth:`next_phase` starts the one after training)."""

    project: Any  # gitlab.v4.objects.Project
    targets: tuple[Any, ...]  # ci_runner.gitlab.comments.Target
    session: Any  # ci_runner.gitlab.transport.BoundedSession
    # Post the result as a new note at the end of a run (GitLab notifies of a new note, not of
    # an edited one); off with the component input notify_result: false.
    notify: bool = True

    def next_phase(self) -> None:
        """A fresh budget of the same length for the GitLab work after training."""
        from ci_runner.gitlab.transport import Budget

        old = self.session.budget
        self.session.budget = Budget(old.clock, old.seconds)

    def found_again(self, ctx: CIContext, console: StatusOutput) -> GitLabDestination:
        """The targets looked for again (after training): an MR opened or filled in since the
        start is added; those of the start stay (their comment is edited). A failure is one
        warning and keeps the start's targets."""
        from ci_runner.gitlab.comments import find_targets, merged_targets

        if self.out_of_time:
            return self
        try:
            now = find_targets(self.project, ctx)
        except GitLabError as error:
            console.warning(f"merge requests not looked for again: {error}")
            return self
        return replace(self, targets=tuple(merged_targets(self.targets, now)))

    @property
    def out_of_time(self) -> bool:
        """The phase's budget ran out (and was warned about): GitLab is left alone."""
        return bool(self.session.budget.spent)


def open_gitlab(
    ctx: CIContext,
    settings: Settings,
    console: StatusOutput,
    clock: Clock | None = None,
) -> GitLabDestination | None:
    """The merge requests to comment on, or None (with one warning) when we cannot post.

    Outside GitLab CI nothing is posted and nothing is said. All of it takes at most
    ``CI_RUNNER_GITLAB_TIMEOUT`` seconds (default 20) on ``clock``.
    """
    if not ctx.in_ci or not ctx.server_url:
        return None
    from ci_runner.gitlab.client import connect_gitlab, gitlab_api_token, open_project
    from ci_runner.gitlab.comments import find_targets, report_project_id
    from ci_runner.gitlab.transport import BoundedSession, Budget

    session = BoundedSession(Budget(clock or SystemClock(), settings.gitlab_budget))
    try:
        token = gitlab_api_token(settings.gitlab_token, job_token=settings.job_token)
        gl = connect_gitlab(ctx.server_url, token, session=session)
        project = open_project(gl, report_project_id(ctx))
        targets = find_targets(project, ctx)
    except GitLabError as error:
        console.warning(f"not commenting on GitLab: {error}")
        return None
    return GitLabDestination(project, tuple(targets), session, settings.notify_result)
