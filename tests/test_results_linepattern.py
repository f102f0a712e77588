"""Which metric patterns may be matched over blocks of lines: exact decisions, and soundness
against matching line by line (prefix removed, first match only) on generated logs."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner.config.linear import LinearPattern, encode
from ci_runner.results.linepattern import block_pattern, leading_text
from ci_runner.results.rank_prefix import split_prefix

EXAMPLE_TRAIN = (
    r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"
)


@pytest.mark.parametrize(
    ("pattern", "block_text"),
    [
        (EXAMPLE_TRAIN, f"(?:{EXAMPLE_TRAIN})[^\\n]*"),
        (r"step (?P<step>\d+)", r"(?:step (?P<step>\d+))[^\n]*"),
        (r"loss=(?P<value>\S+)", r"(?:loss=(?P<value>\S+))[^\n]*"),
        (r"\bloss (?P<value>\d+)\b", r"(?:\bloss (?P<value>\d+)\b)[^\n]*"),
        (r"(?i)LOSS: (?P<value>.+)", r"(?i)(?:LOSS: (?P<value>.+))[^\n]*"),
        (r"rr (?P<value>\d)", r"(?:rr (?P<value>\d))[^\n]*"),  # 'r' and 'r' are prefix chars
    ],
)
def test_patterns_matched_over_blocks(pattern: str, block_text: str) -> None:
    assert block_pattern(re.compile(pattern)) == block_text
    LinearPattern(block_text)  # RE2 runs it


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"loss\s(?P<value>\d+)", r"\s matches a line break"),
        (r"loss (?P<value>[^,]+)", "a negated set matches a line break"),
        (r"(?s)loss (?P<value>.+)", "DOTALL: . matches a line break"),
        (r"^loss (?P<value>\d+)", "an anchor"),
        (r"loss (?P<value>\d+)$", "an anchor"),
        (r"(?<=: )(?P<value>\d+)", "a lookbehind sees the prefix"),
        (r"loss (?=\d)(?P<value>\d+)", "a lookahead"),
        (r"(?P<value>\d+)", "starts with a digit: it could match the rank in [3]<stdout>:"),
        (r"out>:x(?P<value>\d)", "could start inside a prefix"),
        (r":(?P<value>\d+)", "could start at the prefix's closing colon"),
        (r"x?(?P<value>1)", "starts with an optional character"),
        (r"(?P<value>\d*)", "matches the empty string"),
        (r"(a)(?P<value>\d)\1", "a backreference"),
        (r"(?i)\u212a(?P<value>\d)", "the Kelvin sign matches k ignoring case"),
        (r"(?x) loss [ ]* (?P<value>\d+)  # c", "verbose: RE2 has no such mode"),
    ],
)
def test_patterns_matched_line_by_line(pattern: str, why: str) -> None:
    assert block_pattern(re.compile(pattern)) is None, why


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (EXAMPLE_TRAIN, "Training. Epoch "),
        (r"\bloss=(?P<value>\d+)", "loss="),
        (r"(?:ab)c(?P<value>x)y+", "abcxy"),
        (r"(?i)loss=(?P<value>\d+)", ""),  # the block may say LOSS=
        (r"(a|b)c(?P<value>x)", ""),
        (r"(?P<value>\d+)", ""),
    ],
)
def test_leading_text(pattern: str, text: str) -> None:
    assert leading_text(re.compile(pattern)) == text


def line_by_line(pattern: LinearPattern, lines: list[str]) -> list[tuple[str | None, ...]]:
    """What the metrics parser matches (with RE2): each line's text after the prefix, first
    match."""
    found = []
    for line in lines:
        _rank, text = split_prefix(line)
        data = encode(text)
        spans = pattern.spans(data)
        if spans is not None:
            found.append(_groups(data, spans))
    return found


def over_block(pattern: LinearPattern, lines: list[str]) -> list[tuple[str | None, ...]]:
    data = encode("".join(line + "\n" for line in lines))
    found = []
    at = 0
    while (spans := pattern.spans(data, at)) is not None:
        found.append(_groups(data, spans))
        at = spans[0][1]
    return found


def _groups(data: bytes, spans: list[tuple[int, int]]) -> tuple[str | None, ...]:
    return tuple(None if a < 0 else data[a:b].decode() for a, b in spans[1:])


PIECES = [
    "loss", "Loss", "step", "rr", "out", ">:", ":", " ", "=", ",", "[", "]", "<", ">", "\t",
    "stdout", "stderr", "Training. Epoch", "x", "é", "k", "K",
]  # fmt: skip
ATOMS = [
    "loss", "step", "rr", "out>", "x", ":", " ", "=", r"\.", r"\d", r"\d+", r"\w+", r"\S+",
    r"[a-z]", r"[^,]", r"[0-9.]+", r"\s", ".", r"\b", r"\B", "(?:a|b)", "[ ]*", "(?i:k)",
]  # fmt: skip


@st.composite
def patterns(draw: st.DrawFn) -> str:
    atoms = draw(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=5))
    at = draw(st.integers(0, len(atoms)))
    value = draw(st.sampled_from([r"\d+", r"[-+0-9.eE]+", r"\S+", r"[0-9]", r"\w"]))
    flags = draw(st.sampled_from(["", "(?i)"]))
    return flags + "".join(atoms[:at]) + f"(?P<value>{value})" + "".join(atoms[at:])


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A pattern and log lines, most of them with text that pattern matches somewhere."""
    pattern = draw(patterns())
    matching = st.from_regex(re.compile(pattern)).map(lambda text: text.replace("\n", " "))
    words = st.lists(st.sampled_from([*PIECES, "0", "1", "42", "3.5"]), max_size=6).map("".join)
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        prefix = draw(st.sampled_from(["", "[0]<stdout>:", "[12]<stderr>:", "[1,3]<stdout>:"]))
        lines.append(prefix + draw(st.one_of(matching, words)))
    return pattern, lines


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_block_matches_are_the_line_by_line_matches(case: tuple[str, list[str]]) -> None:
    pattern, lines = case
    block = block_pattern(re.compile(pattern))
    if block is not None:
        expected = line_by_line(LinearPattern(pattern), lines)
        assert over_block(LinearPattern(block), lines) == expected
        # What the parser runs: the pattern itself, first match on each line, from the
        # candidates where its leading text is (or from each line's start without one).
        data = encode("".join(line + "\n" for line in lines))
        leading = encode(leading_text(re.compile(pattern)))
        for lead in {leading, b""}:
            found = LinearPattern(pattern).first_on_each_line(data, lead)
            assert [_groups(data, spans) for spans in found] == expected
