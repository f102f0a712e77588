"""Which Mermaid diagrams of a Markdown body GitLab draws on an MR page, and when.

Rule by rule from gitlabhq ``app/assets/javascripts/behaviors/markdown/render_sandboxed_mermaid.js``
(read at commit 0286e4c628d68960d0ca9e961d82c3ea6ac90633); line numbers are that file's:

* ``renderMermaid`` (:196-220) splits the page's diagrams: those with no ``<details>`` around
  them (``isVisibleMermaid``, :52) are drawn in one pass when the page loads; the others wait
  for their ``<details>`` to be opened, then every diagram inside it is drawn in a pass of its
  own (:212-218).
* ``renderMermaids`` (:127-194) starts each pass with ``renderedChars = 0`` (:135) and, for
  each diagram in document order, shows the "Displaying this diagram might cause performance
  issues" warning instead when (:149-154) the source is longer than ``MAX_CHAR_LIMIT`` (2000,
  :30), or the diagrams drawn before it in this pass total more than that, or 50 diagrams were
  drawn on the page already (``MAX_MERMAID_BLOCK_LIMIT``, :32, counted across passes, :44), or
  the source holds more than 30 ``&`` (:34, :54-64). A drawn diagram adds its length (:185-186).
* The source is the code element's text with ``<br />`` as ``<br>`` (``fixElementSource``,
  :66-71). Here it is the fenced block's content with its last newline: never shorter than
  what GitLab counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

MAX_CHAR_LIMIT = 2000  # render_sandboxed_mermaid.js:30
MAX_MERMAID_BLOCK_LIMIT = 50  # :32
MAX_CHAINING_OF_LINKS_LIMIT = 30  # :34


@dataclass(frozen=True)
class Diagram:
    """One ``mermaid`` block: its source, the ``<details>`` it sits in (their order in the
    body, None: none) and whether GitLab draws it without the reader pressing Display."""

    source: str
    details: int | None
    drawn: bool


def markdown() -> MarkdownIt:
    """A CommonMark parser with GitLab's tables and raw HTML (GitLab sanitises it later)."""
    return MarkdownIt("commonmark", {"html": True}).enable("table")


def diagrams(body: str) -> list[Diagram]:
    """The body's Mermaid diagrams in document order, each marked drawn or not, with the
    visible ones drawn when the page loads and each ``<details>`` drawn when opened."""
    found: list[tuple[str, int | None]] = []
    open_details: list[int] = []
    opened = 0
    for token in markdown().parse(body):
        if token.type in ("html_block", "html_inline"):
            for _ in range(token.content.count("<details")):
                open_details.append(opened)
                opened += 1
            for _ in range(token.content.count("</details>")):
                if open_details:
                    open_details.pop()
        elif token.type == "fence" and token.info.strip() == "mermaid":
            # A nested <details> is drawn with its outermost one (querySelectorAll, :217).
            found.append((token.content, open_details[0] if open_details else None))
    drawn_blocks = 0
    result: dict[int, bool] = {}
    passes: list[int | None] = [None, *sorted({d for _, d in found if d is not None})]
    for details in passes:
        rendered_chars = 0
        for index, (source, where) in enumerate(found):
            if where != details:
                continue
            source = re.sub(r"<br\s*/>", "<br>", source)
            blocked = (
                len(source) > MAX_CHAR_LIMIT
                or rendered_chars > MAX_CHAR_LIMIT
                or drawn_blocks >= MAX_MERMAID_BLOCK_LIMIT
                or source.count("&") > MAX_CHAINING_OF_LINKS_LIMIT
            )
            result[index] = not blocked
            if not blocked:
                rendered_chars += len(source)
                drawn_blocks += 1
    return [Diagram(source, where, result[i]) for i, (source, where) in enumerate(found)]
