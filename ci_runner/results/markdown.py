"""Markdown from untrusted text: one line cleaned, code spans nothing inside can end, safe link
targets. Whole notes are made safe from GitLab's quick actions by
:func:`ci_runner.gitlab.notes.note_body` (which the publisher applies to every body it sends).
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import quote, urlsplit

MAX_TEXT_CHARS: Final = 200  # any untrusted text but the log tail (names, messages) is cut to this
ANSI: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Controls, line separators, zero-width characters and every bidirectional control: the
# embeddings and overrides (U+202A-202E), the isolates (U+2066-2069), the marks (U+200E, U+200F,
# U+061C), which reorder what a reader sees of the text around them (Trojan Source).
CONTROL: Final = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]"
)
# What opens an HTML comment, and how untrusted text shows it: ci-runner's hidden lines are HTML
# comments, and a forged one (a log line printing a marker or a history) must not pose as one
# nor hide the rest of a note. The shown form cannot make a new opening with the text around it.
COMMENT_OPEN: Final = "<!--"
COMMENT_OPEN_SHOWN: Final = "<!- -"


def plural(n: int, word: str) -> str:
    """``1 metric``, ``2 metrics``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fence(text: str, shortest: int = 1) -> str:
    """The run of backticks (at least ``shortest``) that no run inside ``text`` can end."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(shortest, longest + 1)


def clean(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """One line of untrusted text: ANSI and control characters gone, no ``<!--`` (shown as
    ``<!- -``), cut to ``limit``."""
    text = CONTROL.sub(" ", ANSI.sub("", text.replace("\r\n", " ").replace("\n", " ")))
    # After the ANSI codes are gone: "<!\x1b[0m--" is an opening once they are.
    text = text.replace(COMMENT_OPEN, COMMENT_OPEN_SHOWN)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code(text: str, *, in_table: bool = False, limit: int = MAX_TEXT_CHARS) -> str:
    """Untrusted text as an inline code span nothing inside can end (Markdown, HTML,
    mentions and references are not parsed in code). In a table cell ``|`` is escaped."""
    text = clean(text, limit)
    if not text.strip():
        return "(empty)"
    ticks = fence(text)
    if text.startswith("`") or text.endswith("`") or len(ticks) > 1:
        text = f" {text} "
    if in_table:
        text = _TABLE_PIPE.sub(_escape_pipe, text)
    return f"{ticks}{text}{ticks}"


# GFM splits table cells before parsing code spans, reading ``\X`` pairs left to right; a pipe
# is a cell border unless its backslash escape is the odd one out of the run before it.
_TABLE_PIPE: Final = re.compile(r"(\\*)\|")


def _escape_pipe(match: re.Match[str]) -> str:
    run = match.group(1)
    return run + (" " if len(run) % 2 else "") + "\\|"


def safe_url(url: str | None) -> str | None:
    """``url`` usable as a Markdown link target (http/https only; parens and spaces encoded)."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return quote(url.strip(), safe=":/?#@!$&'*+,;=%-._~")


def link(label: str, url: str | None) -> str:
    """``[label](url)``, or just ``label`` when the URL is missing or unsafe (label is trusted)."""
    target = safe_url(url)
    return f"[{label}]({target})" if target else label
