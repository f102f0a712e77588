"""A block of log lines matched at once: RE2 over its UTF-8 bytes for a metric pattern that
:mod:`ci_runner.results.linepattern` proves gives the line-by-line matches, then ``float`` and
``int`` over the columns. None whenever a point needs a closer look (a value that is not a plain
finite number, a step or rank that is not 1 to 18 ASCII digits): the block then goes line by
line, so both ways give the same points."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ci_runner.config.linear import LinearPattern, LinearPatternError, Spans, encode
from ci_runner.results.linepattern import block_pattern, leading_text
from ci_runner.results.rank_prefix import PREFIX_MARK, line_rank

MAX_DIGITS: Final = 18  # a step or rank with more digits is not a plain integer


@dataclass(frozen=True)
class BlockPattern:
    """A metric pattern matched over blocks (their UTF-8 bytes, with RE2): its groups' numbers."""

    regex: LinearPattern
    value: int
    step: int | None
    rank: int | None
    leading: bytes  # what every match begins with, or b""

    @classmethod
    def of(cls, pattern: re.Pattern[str]) -> BlockPattern | None:
        # block_pattern proves the block matches are the line-by-line ones; RE2 runs the pattern
        # itself, first match on each line (LinearPattern.first_on_each_line).
        groups = pattern.groupindex
        if block_pattern(pattern) is None or "value" not in groups:
            return None
        try:
            regex = LinearPattern(pattern.pattern)
        except LinearPatternError:  # validation refuses such a pattern: line by line says so
            return None
        leading = encode(leading_text(pattern))
        return cls(regex, groups["value"], groups.get("step"), groups.get("rank"), leading)

    def points(self, data: bytes) -> tuple[list[int], list[int] | None, list[float]] | None:
        """(ranks, steps or None, values) of a block's bytes; None when a point needs a closer
        look."""
        if self.leading not in data:
            return [], None, []
        matches = self.regex.first_on_each_line(data, self.leading)
        if not matches:
            return [], None, []
        ranks = None
        if self.rank is None:
            ranks = [0] * len(matches)
            if PREFIX_MARK in data:
                ranks = [line_rank(data, spans[0][0]) for spans in matches]
        return _columns(data, matches, self.value, self.step, self.rank, block_ranks=ranks)


def _columns(
    data: bytes,
    matches: list[Spans],
    value: int,
    step: int | None,
    rank: int | None,
    block_ranks: list[int] | None,
) -> tuple[list[int], list[int] | None, list[float]] | None:
    # b"" for a group that took no part: (-1, -1), as findall gives it.
    try:
        values = [float(data[slice(*spans[value])]) for spans in matches]
    except (ValueError, OverflowError):
        return None
    if not all(map(math.isfinite, values)):
        return None
    steps = None if step is None else _plain_integers([data[slice(*m[step])] for m in matches])
    ranks = (
        block_ranks if rank is None else _plain_integers([data[slice(*m[rank])] for m in matches])
    )
    if (step is not None and steps is None) or ranks is None:
        return None
    return ranks, steps, values


def _plain_integers(texts: Sequence[bytes]) -> list[int] | None:
    """``texts`` as integers when each is 1 to 18 ASCII digits (an unmatched group is b"")."""
    joined = b"".join(texts)
    if not (joined.isdigit() and all(texts)):
        return None
    if max(map(len, texts)) > MAX_DIGITS:
        return None
    return list(map(int, texts))
