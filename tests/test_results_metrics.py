"""Metrics from training logs: the seed's real log, interleaved ranks, partial lines, garbage."""

from __future__ import annotations

import itertools
import re
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner.config.types import MetricSpec
from ci_runner.results import metrics
from ci_runner.results.metrics import (
    MAX_JSON_METRICS,
    MAX_PARSED_LINE_CHARS,
    PARSE_CHARS,
    SERIES_CAPACITY,
    LogParser,
    parse_log_file,
    parse_metrics,
)
from testing.metric_specs import ACC, TEST, TRAIN
from testing.paths import SEED_LOG

# The seed's rank 0 / rank 1 losses, epoch 0..19, exactly as printed.
SEED_RANK0 = [
    1338.4868140452961, 935.5324933822116, 654.0407885544738, 593.8755020723866,
    483.1180045366194, 501.9576651239583, 461.72367964229545, 477.2382655836473,
    467.4026207899954, 496.021579158862, 473.9692597730085, 472.89639633833195,
    416.7220215983699, 451.9702810886584, 366.88131853180283, 395.79066620089884,
    390.8923997512978, 516.2323905151153, 501.96195440185153, 441.0054695299096,
]  # fmt: skip
SEED_RANK1 = [
    1148.9670435080386, 934.2259948853756, 633.2420742589119, 599.6154769317578,
    574.4224909156511, 561.3756192270189, 543.3503851517656, 599.5701360625471,
    489.72919646231924, 466.33928261113863, 484.8857977675169, 468.5362197326799,
    460.76999270017814, 439.8771825716403, 470.20061697393044, 431.8841860381735,
    425.90262653747106, 355.790610972445, 442.8678330586471, 445.24695194348794,
]  # fmt: skip


def test_seed_log() -> None:
    summary = parse_log_file(SEED_LOG, [TRAIN, TEST])

    train, test = summary.metrics
    assert train.name == "train_loss"
    assert train.count == 40
    assert train.unparseable == 0
    assert train.final_step == 19
    assert train.final == (441.0054695299096 + 445.24695194348794) / 2
    assert train.final == 443.1262107366988
    assert (train.best, train.best_step, train.best_rank) == (355.790610972445, 17, 1)
    assert [s.rank for s in train.series] == [0, 1]
    assert [v for _, v in train.series[0].points] == SEED_RANK0
    assert [v for _, v in train.series[1].points] == SEED_RANK1
    assert [step for step, _ in train.series[1].points] == list(range(20))
    assert (test.count, test.final, test.final_step, test.best) == (
        2,
        219.68063354492188,
        0,
        219.68063354492188,
    )
    assert summary.lines == len(SEED_LOG.read_text(encoding="utf-8").splitlines())


def test_interleaved_ranks_final_is_the_mean_at_the_last_step() -> None:
    spec = MetricSpec("loss", re.compile(r"step (?P<step>\d+) loss (?P<value>\S+)"))
    lines = [
        "[1]<stdout>:step 0 loss 4.0",
        "[0]<stdout>:step 0 loss 2.0",
        "[0]<stdout>:step 1 loss 1.0",
        "[2]<stdout>:step 0 loss 9.0",  # rank 2 stopped early: not part of the final mean
        "[1]<stdout>:step 1 loss 3.0",
    ]
    metric = parse_metrics(lines, [spec]).metrics[0]

    assert (metric.count, metric.final_step, metric.final) == (5, 1, 2.0)
    assert (metric.best, metric.best_step, metric.best_rank) == (1.0, 1, 0)


def test_rank_group_overrides_the_prefix_and_no_step_counts_per_rank() -> None:
    spec = MetricSpec("acc", re.compile(r"worker (?P<rank>\d+) acc (?P<value>\S+)"), goal="max")
    lines = ["[0]<stdout>:worker 5 acc 0.1", "worker 5 acc 0.3", "worker 6 acc 0.2"]
    metric = parse_metrics(lines, [spec]).metrics[0]

    assert [(s.rank, s.points) for s in metric.series] == [
        (5, ((0, 0.1), (1, 0.3))),
        (6, ((0, 0.2),)),
    ]
    assert metric.final_step == 1
    assert metric.final == 0.3  # only rank 5 reached index 1
    assert (metric.best, metric.best_rank) == (0.3, 5)


def test_unparseable_values_are_counted_not_fatal() -> None:
    spec = MetricSpec("loss", re.compile(r"loss=(?P<value>\S+)(?: step=(?P<step>\S+))?"))
    lines = ["loss=nan", "loss=inf", "loss=1,5", "loss=0.5 step=x", "loss=1e999", "loss=0.75"]
    metric = parse_metrics(lines, [spec]).metrics[0]

    assert (metric.count, metric.unparseable, metric.unparseable_sample) == (1, 5, "nan")
    assert metric.final == 0.75


def test_an_unparseable_sample_is_cut_to_80_characters() -> None:
    metric = parse_metrics(["acc=" + "z" * 5000], [ACC]).metrics[0]

    assert (metric.unparseable, metric.unparseable_sample) == (1, "z" * 80)


def test_partial_lines_garbage_and_binary_do_not_break_parsing(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(
        b"\xff\xfe garbage \x00\x01\n"
        b"[0]<stdout>:acc=0.5\r\n"
        b"[0]<stdout>:acc=0.\xe2\x82\n"  # a value cut inside a UTF-8 character
        b"[1]<stdo"  # a line cut inside the prefix, at end of file
    )
    summary = parse_log_file(log, [ACC])

    metric = summary.metrics[0]
    assert (metric.count, metric.unparseable, metric.final) == (1, 1, 0.5)
    assert summary.lines == 4


def test_metric_that_never_appears() -> None:
    summary = parse_metrics(["nothing here"], [ACC])

    metric = summary.metrics[0]
    assert not metric.found
    assert (metric.count, metric.final, metric.best, metric.series) == (0, None, None, ())


def test_json_lines() -> None:
    lines = [
        '[1]<stdout>:CI_RUNNER_METRIC {"name": "val_loss", "value": 0.5, "step": 3}',
        '[0]<stdout>:  CI_RUNNER_METRIC {"name": "val_loss", "value": 0.25, "step": 3}',
        'CI_RUNNER_METRIC {"name": "val_loss", "value": 0.75, "step": 4, "rank": 7}',
        'CI_RUNNER_METRIC {"name": "f1", "value": 0.8, "goal": "max"}',
        'CI_RUNNER_METRIC {"name": "f1", "value": 0.9}',
        'CI_RUNNER_METRIC {"name": "accuracy", "value": 0.6}',  # declared: goal from train.yaml
        'CI_RUNNER_METRIC {"name": "val_loss", "value": "NaN"}',
        'CI_RUNNER_METRIC {"name": "val_loss", "value": 1, "step": 1.5}',
        'CI_RUNNER_METRIC {"name": "val_loss", "value": true}',
        'CI_RUNNER_METRIC {"name": "val_loss", "value": 1e400}',
        "CI_RUNNER_METRIC {not json",
        'CI_RUNNER_METRIC {"value": 1}',
        'CI_RUNNER_METRIC ["val_loss", 1]',
        "CI_RUNNER_METRIC " + "[" * 100_000,
    ]
    summary = parse_metrics(lines, [ACC])

    assert [m.name for m in summary.metrics] == ["accuracy", "val_loss", "f1"]
    accuracy, val_loss, f1 = summary.metrics
    assert (accuracy.goal, accuracy.final) == ("max", 0.6)
    assert [(s.rank, s.points) for s in val_loss.series] == [
        (0, ((3, 0.25),)),
        (1, ((3, 0.5),)),
        (7, ((4, 0.75),)),
    ]
    assert (val_loss.final, val_loss.final_step, val_loss.best) == (0.75, 4, 0.25)
    assert val_loss.unparseable == 4
    assert (f1.goal, f1.best, f1.final) == ("max", 0.9, 0.9)
    assert summary.ignored_json == 4


def test_json_metric_names_are_capped() -> None:
    lines = [f'CI_RUNNER_METRIC {{"name": "m{i}", "value": {i}}}' for i in range(200)]
    summary = parse_metrics(lines, [ACC])

    assert len(summary.metrics) == 1 + MAX_JSON_METRICS
    assert summary.ignored_json == 200 - MAX_JSON_METRICS


def test_series_are_decimated_but_counts_final_and_best_are_exact() -> None:
    spec = MetricSpec("loss", re.compile(r"step (?P<step>\d+) loss (?P<value>\S+)"))

    def lines() -> Iterator[str]:
        for step in range(50_000):
            for rank in range(2):
                yield f"[{rank}]<stdout>:step {step} loss {1000 - step / 100 + rank}\n"

    metric = parse_metrics(lines(), [spec]).metrics[0]

    assert metric.count == 100_000
    assert metric.final == (1000 - 49_999 / 100 + 1000 - 49_999 / 100 + 1) / 2
    assert (metric.best, metric.best_step, metric.best_rank) == (1000 - 49_999 / 100, 49_999, 0)
    for series in metric.series:
        assert series.count == 50_000
        assert len(series.points) <= SERIES_CAPACITY + 1
        assert series.points[0][0] == 0
        assert series.points[-1][0] == 49_999
        steps = [s for s, _ in series.points[:-1]]
        gaps = {b - a for a, b in itertools.pairwise(steps)}
        assert len(gaps) == 1  # evenly spread


def test_memory_stays_bounded_for_a_long_log() -> None:
    spec = MetricSpec("loss", re.compile(r"loss (?P<value>\S+)"))

    def lines() -> Iterator[str]:
        for i in range(160_000):
            yield f"[{i % 8}]<stdout>:loss {i}\n"

    tracemalloc.start()
    summary = parse_metrics(lines(), [spec])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert summary.metrics[0].count == 160_000
    assert peak < 5_000_000


def test_ranks_per_metric_are_capped() -> None:
    spec = MetricSpec("loss", re.compile(r"rank (?P<rank>\d+) loss (?P<value>\S+)"))
    summary = parse_metrics((f"rank {i} loss 1" for i in range(1100)), [spec])

    metric = summary.metrics[0]
    assert (len(metric.series), metric.unparseable) == (1024, 76)


def test_a_ten_megabyte_line(tmp_path: Path) -> None:
    line = "[0]<stdout>:" + "x" * 10_000_000 + " acc=0.5"
    assert parse_metrics([line], [ACC]).metrics[0].final == 0.5
    log = tmp_path / "log"
    log.write_text(f"{line}\nacc=0.25\n" + "y" * (MAX_PARSED_LINE_CHARS + 5) + " acc=0.75")
    summary = parse_log_file(log, [ACC])
    assert [p for _, p in summary.metrics[0].series[0].points] == [0.5, 0.25, 0.75]
    assert summary.lines == 4  # the last, huge line was read in two pieces


# -- blocks at once give what line by line gives ----------------------------------------------

FAST_TRAIN = MetricSpec(
    "train_loss",
    re.compile(
        r"Epoch (?P<step>\d+), loss: (?P<value>[-+0-9.eEnaif]*)(?:, Worker: (?P<rank>\d+))?"
    ),
)
FAST_ACC = MetricSpec("accuracy", re.compile(r"acc=(?P<value>[-+0-9.eEnaif]+)"), goal="max")


def test_the_examples_patterns_are_parsed_a_block_at_a_time() -> None:
    parser = metrics._Parser([FAST_TRAIN, FAST_ACC])
    assert parser.block_patterns is not None
    assert metrics._Parser([TRAIN, ACC]).block_patterns is None  # [^,] matches a line break


def one_of(draw: st.DrawFn, usual: list[str], unusual: list[str], messy: bool) -> str:
    """One of ``usual``, or in a messy log now and then of ``unusual``."""
    return draw(st.sampled_from(unusual if messy and not draw(st.integers(0, 9)) else usual))


def metric_line(draw: st.DrawFn, messy: bool) -> str:
    prefix = draw(st.sampled_from(["", "[0]<stdout>:", "[3]<stderr>:", "[1,2]<stdout>:"]))
    numbers = (["0", "1", "2", "3"], ["007", "", "+3", "\u0663", "9" * 19, "5"])
    values = (["1.5", "0.25", "-2", "3e2", "2", "1.5"], ["nan", "inf", "1,5", "", "1e999"])
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return prefix + draw(st.sampled_from(["", "chatter", "acc=", "Epoch x", "\r", "é"]))
    if kind == 1 and messy:
        payload = draw(st.sampled_from(['{"name": "acc2", "value": 1}', "{bad", '{"name": 1}']))
        return f"{prefix}CI_RUNNER_METRIC {payload}"
    if kind <= 2:
        return f"{prefix}acc={one_of(draw, *values, messy)} acc={one_of(draw, *values, messy)}"
    worker = f", Worker: {one_of(draw, *numbers, messy)}"
    if messy and not draw(st.integers(0, 9)):
        worker = ""  # the rank group does not take part: the prefix's rank
    step, value = one_of(draw, *numbers, messy), one_of(draw, *values, messy)
    return f"{prefix}Epoch {step}, loss: {value}{worker}"


@st.composite
def logs(draw: st.DrawFn) -> str:
    messy = draw(st.booleans())  # a clean log goes a block at a time, a messy one partly not
    lines = [metric_line(draw, messy) for _ in range(draw(st.integers(0, 60)))]
    ending = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return ending.join(lines) + draw(st.sampled_from(["", ending]))


def test_the_ranks_share_the_points_a_metric_keeps() -> None:
    spec = MetricSpec("loss", re.compile(r"step (?P<step>\d+) loss (?P<value>\S+)"))

    def lines(ranks: int) -> Iterator[str]:
        for step in range(400):
            for rank in range(ranks):
                yield f"[1,{rank}]<stdout>:step {step} loss {1 / (step + 1) + rank}\n"

    many = parse_metrics(lines(256), [spec]).metrics[0]
    few = parse_metrics(lines(8), [spec]).metrics[0]

    # 256 ranks: 128 points each at most (32,768 / 256): every 4th step, and the last.
    assert many.count == 102_400
    assert {s.points for s in many.series} == {
        tuple((step, 1 / (step + 1) + s.rank) for step in [*range(0, 400, 4), 399])
        for s in many.series
    }
    assert sum(len(s.points) for s in many.series) == 256 * 101 <= SERIES_CAPACITY
    # 8 ranks: 4,096 each: every step.
    assert [len(s.points) for s in few.series] == [400] * 8


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    log=logs(),
    block=st.sampled_from([1, 40, 200, 4096]),
    capacity=st.sampled_from([2, 3, 1024]),
    longest=st.sampled_from([30, MAX_PARSED_LINE_CHARS]),
)
def test_blocks_give_the_line_by_line_summary(
    tmp_path_factory: pytest.TempPathFactory,
    log: str,
    block: int,
    capacity: int,
    longest: int,
) -> None:
    path = tmp_path_factory.mktemp("log") / "train.log"
    path.write_bytes(log.encode())
    specs = [FAST_TRAIN, FAST_ACC]
    with pytest.MonkeyPatch.context() as patch:
        # Small blocks, series, rank caps and line limits: every boundary is crossed often.
        patch.setattr(metrics, "BLOCK_CHARS", block)
        patch.setattr(metrics, "SERIES_CAPACITY", capacity)
        patch.setattr(metrics, "MAX_RANKS_PER_METRIC", 3)
        patch.setattr(metrics, "MAX_PARSED_LINE_CHARS", longest)
        with path.open(encoding="utf-8", errors="replace") as text:
            expected = parse_metrics(iter(lambda: text.readline(longest), ""), specs)
        assert parse_log_file(path, specs) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    log=logs(),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    longest=st.sampled_from([30, MAX_PARSED_LINE_CHARS]),
    held=st.sampled_from([1, 50, PARSE_CHARS]),
)
def test_the_log_parsed_as_it_streams_is_the_saved_log_parsed(
    tmp_path_factory: pytest.TempPathFactory, log: str, cuts: list[int], longest: int, held: int
) -> None:
    path = tmp_path_factory.mktemp("log") / "train.log"
    path.write_bytes(log.encode())
    specs = [FAST_TRAIN, FAST_ACC]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "SERIES_CAPACITY", 3)
        patch.setattr(metrics, "MAX_PARSED_LINE_CHARS", longest)
        patch.setattr(metrics, "PARSE_CHARS", held)
        streamed = LogParser(specs)
        # Pieces split anywhere, as the LogSink's echo gets them (newline=\n as it saves them).
        text = path.read_text(encoding="utf-8", errors="replace")
        at = 0
        for cut in sorted(cuts):
            streamed.feed(text[at:cut])
            at = max(at, cut)
        streamed.feed(text[at:])
        assert streamed.summary() == parse_log_file(path, specs)


NESTED = MetricSpec("loss", re.compile(r"loss (?P<value>(\d+)+)x"))
FORTY = "1234567890" * 4


@pytest.mark.timeout(120)  # Python's re: hours on the 40 digits, never ending on 10,000
def test_a_nested_quantifier_parses_long_lines_in_bounded_time(tmp_path: Path) -> None:
    lines = [f"[0]<stdout>:loss {'7' * 10_000}", f"[0]<stdout>:loss {FORTY}", *["x"] * 3]
    lines.append(f"[1]<stdout>:loss {FORTY}x")
    path = tmp_path / "train.log"
    path.write_text("".join(line + "\n" for line in lines) * 20)
    for summary in (parse_log_file(path, [NESTED]), parse_metrics(lines * 20, [NESTED])):
        result = summary.get("loss")
        assert result is not None
        assert (result.count, result.unparseable, result.final) == (20, 0, float(FORTY))
        assert result.best_rank == 1
