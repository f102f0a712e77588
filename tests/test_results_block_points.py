"""ci_runner.results.block_points: a metric pattern matched over a block's bytes at once, or
refused where line by line must look closer."""

from __future__ import annotations

import re

from ci_runner.results.block_points import BlockPattern


def _pattern(text: str) -> BlockPattern:
    pattern = BlockPattern.of(re.compile(text))
    assert pattern is not None
    return pattern


def test_a_block_gives_each_lines_first_match_as_columns() -> None:
    loss = _pattern(r"step (?P<step>\d+) loss (?P<value>[-+0-9.eE]+)")
    data = b"[1]<stdout>:step 3 loss 0.5 step 4 loss 9\nchatter\n[0]<stderr>:step 4 loss 0.25\n"

    assert loss.points(data) == ([1, 0], [3, 4], [0.5, 0.25])
    assert loss.points(b"no metric here\n") == ([], None, [])
    assert _pattern(r"r(?P<rank>\d+) acc=(?P<value>[0-9.]+)").points(b"r7 acc=1\n") == (
        [7],
        None,
        [1.0],
    )


def test_a_point_that_needs_a_closer_look_refuses_the_block() -> None:
    loss = _pattern(r"step (?P<step>\d*) loss (?P<value>[-+0-9.eEnaif]+)")

    assert loss.points(b"step 1 loss nan\n") is None  # not a finite number
    assert loss.points(b"step  loss 1\n") is None  # a step that took no digit
    assert loss.points(b"step " + b"9" * 19 + b" loss 1\n") is None  # not a plain integer


def test_a_pattern_that_may_match_a_line_break_or_has_no_value_is_line_by_line_only() -> None:
    assert BlockPattern.of(re.compile(r"loss: (?P<value>[^,]+)")) is None
    assert BlockPattern.of(re.compile(r"loss: (?P<loss>[0-9.]+)")) is None


def test_torchrun_lines_give_their_ranks_in_a_block() -> None:
    loss = _pattern(r"step (?P<step>\d+) loss (?P<value>[-+0-9.eE]+)")
    data = b"[1]<std>:step 3 loss 0.5\n[rank1]: step 9 loss 9\n[0]<std>:step 4 loss 0.25\n"

    assert loss.points(data) == ([1, 0, 0], [3, 9, 4], [0.5, 9.0, 0.25])
