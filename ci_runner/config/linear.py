"""Regular expressions that run in time linear in the text, whatever the pattern: RE2.

A metric pattern is written by whoever controls train.yaml and meets a log of any content. Python's
``re`` backtracks: ``loss (?P<value>(\\d+)+)x`` takes seconds on a 24-digit line and hours on a
40-digit one. RE2 (the ``google-re2`` wheel) never backtracks, and refuses what needs it
(backreferences, lookarounds, atomic groups, possessive repeats, conditionals); the validator
refuses those patterns with that reason, and the metrics parser matches only through here.

Matching goes through the extension's ``RE2.Match`` (one C call a match, on UTF-8 bytes):
``re2.compile(...).search`` wraps it in Python generators and offset maps, four times slower a
line.
"""

from __future__ import annotations

from typing import Any, Final

import re2
from re2 import _re2

_OPTIONS: Final[Any] = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr
_UNANCHORED: Final[Any] = _re2.RE2.Anchor.UNANCHORED
_ANCHOR_START: Final[Any] = _re2.RE2.Anchor.ANCHOR_START
# What RE2 gives for a group that took no part in the match.
_NO_SPAN: Final = (-1, -1)

Spans = list[tuple[int, int]]  # the match's (start, end) in bytes, then each group's


class LinearPatternError(ValueError):
    """RE2 cannot run the pattern; the message is RE2's, such as ``invalid perl operator: (?=``."""


def encode(text: str) -> bytes:
    """``text`` as the UTF-8 RE2 reads (a lone surrogate kept as its three bytes, never an
    error)."""
    return text.encode("utf-8", "surrogatepass")


def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class LinearPattern:
    """A regular expression compiled by RE2: its named groups, and matches over text or bytes."""

    __slots__ = ("_match", "groupindex", "groups", "pattern")

    def __init__(self, pattern: str) -> None:
        regex = _re2.RE2(encode(pattern), _OPTIONS)
        if not regex.ok():
            raise LinearPatternError(decode(regex.error()))
        self.pattern = pattern
        self._match = regex.Match
        self.groups: int = regex.NumberOfCapturingGroups()
        self.groupindex: dict[str, int] = {
            decode(name): index for name, index in regex.NamedCapturingGroups()
        }

    def spans(self, data: bytes, start: int = 0, *, anchored: bool = False) -> Spans | None:
        """The first match in ``data`` at or after ``start`` (exactly at ``start`` when
        ``anchored``): the spans of the match and of each group, or None."""
        found: Spans = self._match(
            _ANCHOR_START if anchored else _UNANCHORED, data, start, len(data)
        )
        return None if found[0] == _NO_SPAN else found

    def search(self, text: str) -> dict[str, str | None] | None:
        """The named groups of the first match in ``text`` (None for a group that took no
        part), or None when there is none: ``re.search(...).groupdict()``."""
        data = encode(text)
        found = self.spans(data)
        if found is None:
            return None
        return {
            name: None if found[index] == _NO_SPAN else decode(data[slice(*found[index])])
            for name, index in self.groupindex.items()
        }

    def first_on_each_line(self, data: bytes, leading: bytes = b"") -> list[Spans]:
        """The first match on each line of ``data``, for a pattern that cannot match a line
        break (what searching each line gives); ``leading``, the text every match begins with,
        lets ``bytes.find`` skip to where a match can start (RE2 then matches anchored there)."""
        found: list[Spans] = []
        match, find, end = self._match, data.find, len(data)
        if leading:
            at = find(leading)
            while at >= 0:
                spans = match(_ANCHOR_START, data, at, end)
                if spans[0] == _NO_SPAN:
                    at = find(leading, at + 1)
                    continue
                found.append(spans)
                at = find(b"\n", spans[0][1])
                at = find(leading, at) if at >= 0 else -1
            return found
        at = 0
        while at < end:
            spans = match(_UNANCHORED, data, at, end)
            if spans[0] == _NO_SPAN:
                break
            found.append(spans)
            at = find(b"\n", spans[0][1])
            if at < 0:
                break
        return found
