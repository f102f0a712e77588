"""ci_runner.results.rank_prefix: a log line's ``[rank]<stdout>:`` prefix, in a line and in a
block."""

from __future__ import annotations

import re

from ci_runner.config.types import MetricSpec
from ci_runner.results.metrics import parse_metrics
from ci_runner.results.rank_prefix import PREFIX_MARK, line_rank, split_prefix


def test_prefix_is_removed_and_gives_the_rank() -> None:
    assert split_prefix("[3]<stdout>:loss 1") == (3, "loss 1")
    assert split_prefix("[1,12]<stderr>:loss 1") == (12, "loss 1")
    assert split_prefix("loss 1") == (None, "loss 1")
    assert split_prefix(" [3]<stdout>:x") == (None, " [3]<stdout>:x")
    # Not a rank: int() of 5000 digits raises; such a "prefix" is text like any other.
    huge = "[" + "9" * 5000 + "]<stdout>:x"
    assert split_prefix(huge) == (None, huge)
    # The pattern sees the line without the prefix: anchors work.
    spec = MetricSpec("loss", re.compile(r"^loss (?P<value>\S+)$"))
    summary = parse_metrics(["[2]<stdout>:loss 0.5\n", "loss 0.25\n"], [spec])
    assert [(s.rank, s.points) for s in summary.metrics[0].series] == [
        (0, ((0, 0.25),)),
        (2, ((0, 0.5),)),
    ]


def test_the_rank_of_a_line_in_a_block() -> None:
    data = b"[0]<stdout>:a\nno prefix\n[1,12]<stderr>:b\n[" + b"9" * 20 + b"]<stdout>:c"
    assert [line_rank(data, data.index(text)) for text in (b"a", b"no", b"b", b"c")] == [
        0,
        0,
        12,
        0,
    ]
    assert PREFIX_MARK in data
