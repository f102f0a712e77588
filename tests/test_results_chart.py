"""The comment's charts: sampling, axes, palette and key, and GitLab's 2,000-character budget."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ci_runner.config.types import Goal, MetricSpec
from ci_runner.results.chart import (
    CHART_CHARS,
    MEAN_COLOUR,
    RANK_COLOURS,
    charts,
    mermaid_label,
    metric_chart,
)
from ci_runner.results.chart_grid import Grid, natural_grid
from ci_runner.results.metrics import SERIES_CAPACITY, MetricResult, MetricsSummary, parse_metrics
from ci_runner.results.rank_series import RankSeries

PATTERN = re.compile(r"loss (?P<step>\d+) (?P<value>\S+)")
INIT = '%%{init:{"themeVariables":{"xyChart":{"plotColorPalette":"'


def _metric(
    ranks: Mapping[int, Iterable[tuple[int, float]]], name: str = "loss", goal: Goal = "min"
) -> MetricResult:
    """The metric parsed from a log where each rank prints ``loss <step> <value>``."""
    lines = [f"[{r}]<stdout>:loss {s} {v!r}" for r, points in ranks.items() for s, v in points]
    return parse_metrics(lines, [MetricSpec(name, PATTERN, goal)]).metrics[0]


def _source(metric: MetricResult, budget: int = CHART_CHARS) -> list[str]:
    chart = metric_chart(metric, budget)
    assert chart is not None
    return chart.source.splitlines()


def _key(metric: MetricResult, budget: int = CHART_CHARS) -> str:
    chart = metric_chart(metric, budget)
    assert chart is not None
    return chart.key


def _values(line: str) -> list[float]:
    return [float(v) for v in line.split("[", 1)[1].rstrip("]").split(",")]


# ----------------------------------------------------------------------------- the source


def test_two_ranks_full_source() -> None:
    metric = _metric({0: [(s, 10.0 - s) for s in range(10)], 1: [(s, 12.0 - s) for s in range(10)]})

    chart = metric_chart(metric)

    assert chart is not None
    assert chart.source == (
        INIT + '#4c84d8,#e65c00,#7d7d7d"}}}}%%\n'
        "xychart-beta\n"
        'x-axis "step" 0 --> 9\n'
        'y-axis "loss"\n'
        'line "rank 0" [10,9,8,7,6,5,4,3,2,1]\n'
        'line "rank 1" [12,11,10,9,8,7,6,5,4,3]\n'
        'line "mean" [11,10,9,8,7,6,5,4,3,2]\n'
    )
    assert chart.key == "Lines: rank 0 blue, rank 1 orange, mean grey (on top)."
    assert chart.chars == len(chart.source)


def test_one_rank_is_one_named_line() -> None:
    assert _source(_metric({3: [(0, 5.0), (1, 4.0), (2, 3.0)]}))[2:] == [
        'x-axis "step" [0, 1, 2]',
        'y-axis "loss"',
        'line "rank 3" [5,4,3]',
    ]
    assert _key(_metric({3: [(0, 5.0), (1, 4.0)]})) == (
        "Line: rank 3 blue (the only rank that logged it)."
    )


def test_fewer_than_two_steps_is_no_chart() -> None:
    assert metric_chart(_metric({0: [(4, 1.0)], 1: [(4, 2.0)]})) is None
    assert metric_chart(_metric({})) is None


def test_charts_of_a_summary_in_order_at_most_four() -> None:
    ranks = {0: [(0, 1.0), (1, 2.0)]}
    metrics = [_metric(ranks, name=f"m{i}") for i in range(6)]
    flat = _metric({0: [(0, 1.0)]}, name="flat")
    summary = MetricsSummary(metrics=(flat, *metrics), lines=0)

    assert [c.metric for c in charts(summary)] == ["m0", "m1", "m2", "m3"]


# ----------------------------------------------------------------------------- honest sampling


def test_a_rank_that_stopped_early_is_left_out_and_the_mean_is_over_those_present() -> None:
    metric = _metric({0: [(s, 10.0 - s) for s in range(10)], 1: [(s, 12.0 - s) for s in range(5)]})

    lines = _source(metric)

    assert lines[4:] == [
        'line "rank 0" [10,9,8,7,6,5,4,3,2,1]',
        'line "mean" [11,10,9,8,7,5,4,3,2,1]',
    ]
    assert _key(metric) == (
        "Lines: rank 0 blue, mean grey (on top). Not drawn, having no points over part of the "
        "chart: rank 1 (steps 0–4). The mean is over the ranks that logged each step."
    )


def test_a_rank_that_started_late_is_left_out() -> None:
    metric = _metric(
        {0: [(s, 10.0 - s) for s in range(10)], 1: [(s, 12.0 - s) for s in range(3, 10)]}
    )

    assert _source(metric)[4:] == [
        'line "rank 0" [10,9,8,7,6,5,4,3,2,1]',
        'line "mean" [10,9,8,8,7,6,5,4,3,2]',
    ]
    assert "rank 1 (steps 3–9)" in _key(metric)


def test_a_step_logged_twice_keeps_its_last_value() -> None:
    metric = _metric({0: [(0, 5.0), (1, 4.0), (1, 3.5), (2, 3.0)]})

    assert _source(metric)[-1] == 'line "rank 0" [5,3.5,3]'


def test_sparse_steps_are_drawn_at_their_own_spacing_not_as_stairs() -> None:
    metric = _metric({0: [(s, float(s)) for s in range(0, 100, 5)]})

    lines = _source(metric)

    assert lines[2] == 'x-axis "step" 0 --> 95'
    assert _values(lines[-1]) == [float(s) for s in range(0, 100, 5)]


def test_irregular_steps_get_a_grid_every_step_of_which_was_logged() -> None:
    metric = _metric({0: [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0), (7, 5.0)]})

    assert _source(metric)[2:] == ['x-axis "step" [0, 7]', 'y-axis "loss"', 'line "rank 0" [1,5]']
    assert _key(metric) == (
        "Line: rank 0 blue (the only rank that logged it). Sampled at 2 evenly spaced steps "
        "(a rank logged up to 5 points)."
    )


def test_fewer_points_to_fit_still_find_a_logged_step_at_each() -> None:
    # Steps 0-9 and 20-29: 6 grid steps each land near a logged one, 5 would not (14.5).
    steps = [*range(10), *range(20, 30)]
    metric = _metric({r: [(s, 1.0 + s / 7 + r) for s in steps] for r in range(2)})

    assert natural_grid(steps, 100) == Grid(0, 29, 6)
    assert _source(metric, budget=160)[4:] == ['line "mean" [1.5,2.786,4.357,5.643]']


def test_a_long_run_is_sampled_at_real_points_nearest_each_grid_step() -> None:
    # The value is the step: what is drawn at each grid step says which real point it is.
    metric = _metric({0: [(s, float(s)) for s in range(0, 100_000, 3)]}, name="at")
    kept = {step for step, _ in metric.series[0].points}

    lines = _source(metric)

    assert lines[2] == 'x-axis "step" 0 --> 99999'
    values = _values(lines[-1])
    assert len(values) == 99  # not 100: see test_no_grid_that_mermaid_draws_short
    grid = Grid(0, 99_999, 99)
    half = 99_999 / 98 / 2
    for k, value in enumerate(values):
        assert abs(value - grid.step(k)) <= half
    assert values[0] == 0 and values[-1] == 99_999
    assert {round(v) for v in values} <= kept | {99_999}


# ----------------------------------------------------------------------------- x axis


@pytest.mark.parametrize(
    ("steps", "axis"),
    [
        (range(18, 20), 'x-axis "step" [18, 19]'),
        (range(8), 'x-axis "step" [0, 1, 2, 3, 4, 5, 6, 7]'),
        (range(9), 'x-axis "step" 0 --> 8'),
        (range(0, 10, 5), 'x-axis "step" [0, 5]'),
        (range(0, 15, 5), 'x-axis "step" 0 --> 10'),
    ],
)
def test_short_runs_label_whole_steps(steps: range, axis: str) -> None:
    # d3's ticks are whole from a span of 8: a shorter run names its steps on a band axis.
    assert _source(_metric({0: [(s, float(s)) for s in steps]}))[2] == axis


# ----------------------------------------------------------------------------- y axis


def test_a_warm_up_spike_is_cut_off_and_said_so() -> None:
    metric = _metric({0: [(s, 10.0 + 1000 * (s == 0) + 1 / (s + 1)) for s in range(30)]})

    lines = _source(metric)

    assert lines[3] == 'y-axis "loss (cut at 10.53)" 10.03 --> 10.53'
    assert _values(lines[4])[:4] == [10.53, 10.5, 10.3333, 10.25]
    assert _key(metric) == (
        "Line: rank 0 blue (the only rank that logged it). The axis is cut at 10.53: higher "
        "values of the first steps (up to 1011) are drawn at its top."
    )


def test_a_low_start_of_a_metric_to_maximise_is_cut_at_the_bottom() -> None:
    values = {0: [(s, 0.9 - 0.8 * (s < 2) + s / 1000) for s in range(30)]}
    metric = _metric(values, name="accuracy", goal="max")

    assert _source(metric)[3] == 'y-axis "accuracy (cut at 0.9)" 0.9 --> 0.929'
    assert "lower values of the first steps (down to 0.1) are drawn at its bottom" in _key(metric)


def test_a_learning_curve_is_not_cut() -> None:
    # Steep at first over many points: the shape of learning, not a warm-up spike.
    metric = _metric({0: [(s, 0.98 - 0.5 / (1 + s / 10)) for s in range(300)]}, goal="max")

    assert _source(metric)[3] == 'y-axis "loss"'


def test_a_spike_that_leaves_room_is_not_cut() -> None:
    metric = _metric({0: [(s, 10.0 - s / 10 + 2 * (s == 0)) for s in range(30)]})

    assert _source(metric)[3] == 'y-axis "loss"'


def test_no_cut_on_short_charts() -> None:
    metric = _metric({0: [(0, 1000.0), *((s, 1.0 + s / 100) for s in range(1, 9))]})

    assert _source(metric)[3] == 'y-axis "loss"'


@pytest.mark.parametrize(
    ("scale", "title", "first"),
    [
        (1e-4, 'y-axis "loss (×1e-6)"', 500.0),
        (1e6, 'y-axis "loss (×1e6)"', 5.0),
        (1.0, 'y-axis "loss"', 5.0),
    ],
)
def test_very_large_or_small_values_are_scaled(scale: float, title: str, first: float) -> None:
    metric = _metric({0: [(s, scale * (5 - s / 10)) for s in range(30)]})

    lines = _source(metric)

    assert lines[3] == title
    assert _values(lines[4])[0] == first


@pytest.mark.parametrize(
    ("base", "step", "title", "values"),
    [
        (1e9, 0.001, 'y-axis "loss (minus 1000000000)"', [0, 0.001, 0.002]),
        (5.0, 1e-6, 'y-axis "loss (minus 5; ×1e-6)"', [0, 1, 2]),
    ],
)
def test_values_that_differ_only_in_late_digits_are_shown_less_a_round_number(
    base: float, step: float, title: str, values: list[float]
) -> None:
    lines = _source(_metric({0: [(s, base + s * step) for s in range(12)]}))

    assert lines[3] == title
    assert _values(lines[4])[:3] == values


def test_a_constant_metric_gets_room_around_it() -> None:
    lines = _source(_metric({0: [(s, 0.5) for s in range(3)]}))

    assert lines[3:] == ['y-axis "loss" 0.45 --> 0.55', 'line "rank 0" [0.5,0.5,0.5]']


def test_negative_values_are_plain_decimals() -> None:
    lines = _source(_metric({0: [(s, -s * 0.25) for s in range(4)]}))

    assert lines[-1] == 'line "rank 0" [0,-0.25,-0.5,-0.75]'


# ----------------------------------------------------------------------------- lines and colours


def test_many_ranks_draw_lowest_highest_and_mean() -> None:
    metric = _metric({r: [(s, float(10 * s + r)) for s in range(10)] for r in range(8)})

    lines = _source(metric)

    assert lines[0] == INIT + '#4c84d8,#e65c00,#7d7d7d"}}}}%%'
    assert lines[4:] == [
        'line "lowest rank" [0,10,20,30,40,50,60,70,80,90]',
        'line "highest rank" [7,17,27,37,47,57,67,77,87,97]',
        'line "mean" [3.5,13.5,23.5,33.5,43.5,53.5,63.5,73.5,83.5,93.5]',
    ]
    assert _key(metric) == (
        "Lines: lowest rank blue, highest rank orange, mean grey (on top): the lowest and "
        "highest value and the mean of the 8 ranks at each step."
    )


def test_four_ranks_each_get_their_colour() -> None:
    metric = _metric({r: [(s, float(s + r)) for s in range(3)] for r in (0, 2, 5, 7)})

    assert _source(metric)[0] == INIT + '#4c84d8,#e65c00,#009e73,#cc79a7,#7d7d7d"}}}}%%'
    assert _key(metric) == (
        "Lines: rank 0 blue, rank 2 orange, rank 5 green, rank 7 pink, mean grey (on top)."
    )


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_palette_is_readable_on_gitlabs_light_and_dark_charts_with_the_mean_darkest() -> None:
    # The chart's background is the theme's: neutral #ffffff, dark #333 (Mermaid's
    # themes/theme-neutral.js and theme-dark.js, xyChart.backgroundColor); WCAG's 3:1 for
    # graphics on both.
    palette = [MEAN_COLOUR, *RANK_COLOURS]
    for colour in palette:
        assert _contrast(colour.hex, "#ffffff") >= 3, colour
        assert _contrast(colour.hex, "#333333") >= 3, colour
    assert min(palette, key=lambda c: _luminance(c.hex)) == MEAN_COLOUR
    assert len({c.hex for c in palette}) == len({c.name for c in palette}) == len(palette)


# ----------------------------------------------------------------------------- budget


def _run(ranks: int, steps: int, offset: float = 0.0) -> MetricResult:
    """``steps`` steps on each rank, kept as the parser keeps a long series (each rank its
    share of SERIES_CAPACITY points, evenly spread with a power-of-two stride, and the last)."""
    stride = 1
    while -(-steps // stride) > max(1, SERIES_CAPACITY // ranks):
        stride *= 2
    kept = [*range(0, steps - 1, stride), steps - 1]
    series = []
    for r in range(ranks):
        points = tuple((s, offset + 100 / (s + 1) + r + (s * 7919 + r) % 13 / 7) for s in kept)
        series.append(RankSeries(r, steps, points[-1][0], points[-1][1], points))
    return MetricResult(
        "loss", "min", steps * ranks, 0, None, None, None, None, None, tuple(series)
    )


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
@pytest.mark.parametrize("steps", [20, 1000, 100_000])
def test_every_chart_fits_gitlabs_limit(ranks: int, steps: int) -> None:
    chart = metric_chart(_run(ranks, steps))

    assert chart is not None
    assert chart.chars <= CHART_CHARS
    drawn = [line for line in chart.source.splitlines() if line.startswith("line ")]
    assert len(drawn) == {1: 1, 2: 3, 4: 5, 8: 3}[ranks]


def test_points_and_digits_go_before_rank_lines() -> None:
    metric = _run(2, 100_000)
    full = metric_chart(metric)
    assert full is not None and len(_values(full.source.splitlines()[-1])) == 99

    # Coarser digits first, then fewer points; the rank lines stay.
    tighter = _source(metric, budget=full.chars - 50)
    assert len(_values(tighter[-1])) == 99
    assert [line.split(" [")[0] for line in tighter[4:]] == [
        'line "rank 0"',
        'line "rank 1"',
        'line "mean"',
    ]
    smaller = _source(metric, budget=700)
    assert 20 <= len(_values(smaller[-1])) < 99
    assert len(smaller) == 7
    assert "Sampled at" in _key(metric, budget=700)


def test_rank_lines_go_last_and_the_key_says_why() -> None:
    metric = _run(2, 100_000, offset=1e9)

    lines = _source(metric, budget=450)

    assert [line.split(" [")[0] for line in lines[4:]] == ['line "mean"']
    assert _key(metric, budget=450).startswith(
        "Line: mean grey, of the 2 ranks at each step; rank lines left out to keep the chart "
        "within GitLab's 2,000 characters."
    )


_FINITE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)
_RANK_POINTS = st.lists(st.tuples(st.integers(0, 10**6), _FINITE), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 12), _RANK_POINTS, min_size=1, max_size=9))
def test_any_series_gives_a_well_formed_chart_within_budget(
    ranks: dict[int, list[tuple[int, float]]],
) -> None:
    series = []
    for rank, points in sorted(ranks.items()):
        last = points[-1]
        series.append(RankSeries(rank, len(points), last[0], last[1], tuple(points)))
    metric = MetricResult("m", "min", 1, 0, None, None, None, None, None, tuple(series))
    steps = {step for points in ranks.values() for step, _ in points}

    chart = metric_chart(metric)

    if len(steps) < 2:
        assert chart is None
        return
    assert chart is not None
    assert chart.chars <= CHART_CHARS
    lines = chart.source.splitlines()
    palette = lines[0].split('"plotColorPalette":"')[1].split('"')[0].split(",")
    series_lines = [line for line in lines if line.startswith("line ")]
    assert len(series_lines) == len(palette) >= 1
    lengths = {len(_values(line)) for line in series_lines}
    assert len(lengths) == 1
    (length,) = lengths
    axis = lines[2]
    if "[" in axis:
        assert len(axis.split("[")[1].split(",")) == length
    else:
        low, high = (int(v) for v in axis.removeprefix('x-axis "step" ').split(" --> "))
        assert (low, high) == (min(steps), max(steps))
    for line in series_lines:
        assert all(map(math.isfinite, _values(line)))


# ----------------------------------------------------------------------------- text


def test_mermaid_label() -> None:
    assert mermaid_label('loss "x"\n```') == "loss _x_ ___"
    assert mermaid_label("\x1b[31mred\x1b[0m loss") == "red loss"
    assert mermaid_label("y" * 80) == "y" * 59 + "_"
    assert mermaid_label("%%{init}%%") == "___init___"
    assert mermaid_label("   ") == "metric"


def test_a_subnormal_value_is_charted() -> None:
    # 5e-324 asked for the power of ten 1e-324, which is 0.0 as a float (ZeroDivisionError).
    points = ((0, 0.0), (1, 5e-324))
    series = (RankSeries(0, 2, 1, 5e-324, points),)
    metric = MetricResult("m", "min", 1, 0, None, None, None, None, None, series)
    chart = metric_chart(metric)
    assert chart is not None
    assert chart.source.splitlines()[1:] == [
        "xychart-beta",
        'x-axis "step" [0, 1]',
        'y-axis "m (×1e-306)"',
        'line "rank 0" [0,0.000000000000000004941]',
    ]
