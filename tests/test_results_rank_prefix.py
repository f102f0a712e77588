"""ci_runner.results.rank_prefix: a log line's ``[rank]<stdout>:`` prefix (torchrun's
``[rank]<std>:`` too), in a line and in a block."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from ci_runner.config.types import MetricSpec
from ci_runner.results.metrics import parse_metrics
from ci_runner.results.rank_prefix import PREFIX_MARK, line_rank, split_prefix
from ci_runner.torchrun_output import TORCHRUN_PREFIX_TEMPLATE


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


def test_torchrun_prefix_on_both_streams() -> None:
    assert split_prefix("[3]<std>:loss 1") == (3, "loss 1")
    assert split_prefix(Template(TORCHRUN_PREFIX_TEMPLATE).substitute(rank=7) + "x") == (7, "x")
    assert split_prefix("[3]<std>:[rank3]: Traceback") == (3, "[rank3]: Traceback")
    for line in ("[3]<stdx>:a", "[3]<st>:a", "[3]<std>a", "[3]<std:a", "[rank3]: a"):
        assert split_prefix(line) == (None, line)
    data = b"[0]<std>:a\n[12]<std>:b\n"
    assert [line_rank(data, data.index(text)) for text in (b"a", b"b")] == [0, 12]
    assert PREFIX_MARK in data


def test_metric_series_per_rank_from_real_torchrun_output() -> None:
    """tests/data/torchrun/ok.log: what torch 2.13's torchrun wrote (stdout and stderr)."""
    log = Path(__file__).resolve().parent / "data" / "torchrun" / "ok.log"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    spec = MetricSpec("loss", re.compile(r"^step (?P<step>\d+) loss (?P<value>\S+)$"))
    summary = parse_metrics(lines, [spec])
    assert [(s.rank, s.points) for s in summary.metrics[0].series] == [
        (0, ((0, 1.0), (1, 0.5))),
        (1, ((0, 0.5), (1, 0.3333))),
    ]
