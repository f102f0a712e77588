"""Note bodies as GitLab keeps them, and the guarantee that no line of a note ci-runner posts can
run a quick action.

GitLab's quick-action extractor (lib/gitlab/quick_actions/extractor.rb:57-70, 96-155 in
gitlabhq/gitlabhq) deletes every ``\\r``, then runs a command for each line that starts with
``/`` and a command name, unless an earlier alternative of its regular expression swallowed that
line (fences of exactly three backticks, "inline code on separate rows" up to the last line ending
in a backtick, HTML and ``>>>`` blocks). Those exceptions depend on the whole note, so nothing
here relies on them: :func:`without_commands` makes sure, after GitLab's ``\\r`` removal, that no
line starts with ``/`` at all, which no alternative of the extractor can turn into a command.
"""

from __future__ import annotations

import re
from typing import Final

RUBY_WHITESPACE: Final = "\x00\t\n\v\f\r "  # what Ruby's String#rstrip removes
_COMMAND_LINE: Final = re.compile(r"^/", re.MULTILINE)


def as_gitlab_stores(body: str) -> str:
    """``body`` as GitLab stores a note without quick actions: ``\\r`` deleted, trailing
    whitespace stripped (extractor.rb:60, 69), so an unchanged report compares equal."""
    return body.replace("\r", "").rstrip(RUBY_WHITESPACE)


def without_commands(text: str) -> str:
    """``text`` with a space before every line that starts with ``/`` once ``\\r`` is gone, so
    GitLab's extractor (``^/(?<cmd>...)``, extractor.rb:146-147) can never match a command."""
    return _COMMAND_LINE.sub(" /", text.replace("\r", ""))


def note_body(markdown: str) -> str:
    """A rendered report as ci-runner posts it: stored form, and no line a quick action."""
    return as_gitlab_stores(without_commands(markdown))
