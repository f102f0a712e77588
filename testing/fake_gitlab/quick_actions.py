"""A port of GitLab's quick-action extractor, for the fake GitLab and for tests that check no text
ci-runner posts can run a command.

Upstream: ``lib/gitlab/quick_actions/extractor.rb`` (gitlabhq/gitlabhq at 18f78289), rule by rule:

- ``\\r`` is deleted before matching (extractor.rb:60); the result is ``rstrip``-ed
  (extractor.rb:69) with Ruby's notion of whitespace (NUL, tab, LF, VT, FF, CR, space),
  not Python's.
- One regular expression with the flags ``mix`` (extractor.rb:97-154): in Ruby ``m`` lets ``.``
  match newlines (Python's DOTALL), ``^``/``$`` are always line anchors (Python's MULTILINE), ``i``
  ignores case. Its alternatives are tried in order at each position: a fenced block of exactly
  three backticks (``^```.+?\\n```$``, 98-107), "inline code on separate rows"
  (``^.*`\\n*.+?\\n*`$``, 109-118), an HTML block (120-129), a ``>>>`` quote (131-140), and only
  then a command: ``^/(?<cmd>names)(?:[ ](?<arg>[^\\n]*))?(?:\\s*\\n|$)`` (142-153). What the first
  four match is kept as it is; a command match is removed and recorded (process_commands, 72-87).
- Ruby's ``\\s`` is ``[ \\t\\r\\n\\f\\v]`` (ASCII only), unlike Python's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

RUBY_WHITESPACE = "\x00\t\n\v\f\r "

# Command names and aliases GitLab defines for merge requests, issues and commits
# (lib/gitlab/quick_actions/{issue_and_merge_request,merge_request,issuable,commit,
# common,relate,spend_time_and_time_tracking}_actions.rb).
COMMAND_NAMES: tuple[str, ...] = (
    "approve", "assign", "assign_reviewer", "award", "board_move", "cc", "clone", "close",
    "confidential", "copy_metadata", "create_merge_request", "done", "draft", "due", "duplicate",
    "estimate", "estimate_time", "label", "labels", "lock", "merge", "milestone", "move",
    "promote_to", "rebase", "react", "ready", "reassign", "reassign_reviewer", "relabel",
    "relate", "remove_due_date", "remove_estimate", "remove_milestone", "remove_time_spent",
    "reopen", "request_review", "request_changes", "reviewer", "reviewers", "shrug", "spend",
    "spent", "spend_time", "submit_review", "subscribe", "tableflip", "tag", "target_branch",
    "title", "todo", "unapprove", "unassign", "unassign_reviewer", "unlabel", "unlock",
    "unsubscribe", "wip", "remove_reviewer", "remove_label", "weight", "clear_weight", "epic",
    "iteration", "health_status", "checkin_reminder", "unlink", "blocks", "blocked_by",
)  # fmt: skip


@lru_cache(maxsize=8)
def commands_regex(names: tuple[str, ...] = COMMAND_NAMES) -> re.Pattern[str]:
    """extractor.rb:96-155 in Python's syntax (``html`` is named twice upstream; here the
    quote block is ``quote``)."""
    union = "|".join(re.escape(name) for name in names)
    return re.compile(
        r"""
            (?P<code>
              ^```
              .+?
              \n```$
            )
          |
            (?P<inline_code>
              ^.*`\n*
              .+?
              \n*`$
            )
          |
            (?P<html>
              ^<[^>]+?>\n
              .+?
              \n</[^>]+?>$
            )
          |
            (?P<quote>
              ^>>>
              .+?
              \n>>>$
            )
          |
            (?:
              ^/
              (?P<cmd>"""
        + union
        + r""")
              (?:
                [ ]
                (?P<arg>[^\n]*)
              )?
              (?:[ \t\r\n\f\v]*\n|$)
            )
        """,
        re.MULTILINE | re.DOTALL | re.VERBOSE | re.IGNORECASE,
    )


def extract_commands(
    content: str, names: Iterable[str] = COMMAND_NAMES
) -> tuple[str, list[list[str]]]:
    """``(content without its commands, [[command, arg?], ...])`` as GitLab's
    ``Extractor#extract_commands`` (extractor.rb:35-41, 57-70) returns them."""
    commands: list[list[str]] = []

    def replace(match: re.Match[str]) -> str:
        if match.group("cmd") is None:
            return match.group(0)
        arg = match.group("arg")
        command = [match.group("cmd").lower(), *([arg] if arg and arg.strip() else [])]
        commands.append(command)
        return ""

    text = commands_regex(tuple(names)).sub(replace, content.replace("\r", ""))
    return text.rstrip(RUBY_WHITESPACE), commands
