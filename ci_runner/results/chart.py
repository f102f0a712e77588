"""The metric charts of the comment: Mermaid ``xychart-beta`` line charts as GitLab draws them.

GitLab draws a diagram on an MR page only when its source is at most 2,000 characters and the
diagrams drawn before it in the same pass total at most 2,000; one inside a ``<details>`` is
drawn when that is opened, with a fresh count (gitlabhq
``app/assets/javascripts/behaviors/markdown/render_sandboxed_mermaid.js``: ``MAX_CHAR_LIMIT``
and ``renderMermaids``). Every chart here fits :data:`CHART_CHARS` on its own; the comment shows
the first one and puts each other one in a ``<details>`` of its own. Within the budget the
points and the digits are chosen to fit; rank lines go only when nothing else fits.

What a chart shows is what the ranks logged: each rank's value at a grid step is its own point
at (or, when steps are sampled, nearest to) that step, never a value carried forward; a rank
without points over the whole chart is left out of the lines and said so; the mean at a step is
over the ranks that have that step. Axes: whole-number step ticks at steps Mermaid draws whole
(:mod:`~ci_runner.results.chart_grid`); a y range cut past a first-steps spike, a power of ten
or a round number taken off the values, said in the axis title
(:mod:`~ci_runner.results.chart_axis`).

GitLab ships Mermaid 10.7, which draws series in palette order and ignores their names: the
palette is set in the chart and each chart's :attr:`Chart.key` spells out which colour is which.
Pure: nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from ci_runner.results.chart_axis import YAxis, chart_number, y_axis
from ci_runner.results.chart_grid import LINEAR_AXIS_SPAN, Grid, natural_grid, usable
from ci_runner.results.markdown import clean
from ci_runner.results.metrics import MetricResult, MetricsSummary
from ci_runner.results.rank_series import RankSeries

# gitlabhq render_sandboxed_mermaid.js: MAX_CHAR_LIMIT = 2000 (a longer source is not drawn).
CHART_CHARS: Final = 2000
MAX_CHART_POINTS: Final = 100  # about one point every 6 pixels on GitLab's chart: more is not seen
MIN_CHART_POINTS: Final = 20  # fewer points than this: drop rank lines rather than points
MAX_CHARTS: Final = 4
MAX_RANK_LINES: Final = 4  # with more ranks: the mean and the lowest and highest rank at each step
LABEL_CHARS: Final = 60


@dataclass(frozen=True)
class Colour:
    """A series colour: readable (3:1 contrast) on GitLab's light and dark chart backgrounds."""

    hex: str
    name: str


MEAN_COLOUR: Final = Colour("#7d7d7d", "grey")  # the darkest of the palette
RANK_COLOURS: Final = (
    Colour("#4c84d8", "blue"),
    Colour("#e65c00", "orange"),
    Colour("#009e73", "green"),
    Colour("#cc79a7", "pink"),
)


@dataclass(frozen=True)
class Chart:
    """One metric's chart: ``source`` is the Mermaid text between the fences (with its last
    newline), ``key`` one line of Markdown saying which colour is which and what was left out."""

    metric: str  # the metric's name as parsed (untrusted: escape it to show it)
    source: str
    key: str

    @property
    def chars(self) -> int:
        """What GitLab counts against :data:`CHART_CHARS`."""
        return len(self.source)


# ----------------------------------------------------------------------------- text


def mermaid_label(text: str, limit: int = LABEL_CHARS) -> str:
    """Text safe inside a quoted Mermaid label: letters, digits and a few marks only (ANSI
    codes dropped, line breaks and control characters as spaces, cut to ``limit``)."""
    cleaned = re.sub(r"[^\w .:/()+-]", "_", clean(text, limit), flags=re.UNICODE)
    return cleaned.strip() or "metric"


# ----------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class _Points:
    """One rank's points by step (ascending, distinct: a step logged twice keeps its last)."""

    rank: int
    steps: list[int]
    values: list[float]

    @classmethod
    def of(cls, series: RankSeries) -> _Points:
        by_step: dict[int, float] = {}
        for step, value in series.points:
            by_step[step] = value
        steps = sorted(by_step)
        return cls(series.rank, steps, [by_step[s] for s in steps])


# ----------------------------------------------------------------------------- lines


@dataclass(frozen=True)
class _Line:
    name: str
    colour: Colour
    values: list[float]


@dataclass(frozen=True)
class _Plan:
    """The lines of a chart at one grid, and what the key says about them."""

    lines: list[_Line]
    key: list[str]


def _lines(points: list[_Points], grid: Grid, ranks_drawn: bool) -> _Plan:
    """The lines: each rank's (at most :data:`MAX_RANK_LINES`, those with a point at every
    grid step) and the mean on top, or the lowest, highest and mean of many ranks; with
    ``ranks_drawn`` false, the mean only."""
    per_rank = [grid.sample(p.steps, p.values) for p in points]
    if len(points) == 1:
        line = _Line(f"rank {points[0].rank}", RANK_COLOURS[0], _full(per_rank[0]))
        return _Plan([line], [_named([line]) + " (the only rank that logged it)."])
    present = [[v for v in column if v is not None] for column in zip(*per_rank, strict=True)]
    mean = _Line("mean", MEAN_COLOUR, [math.fsum(col) / len(col) for col in present])
    if not ranks_drawn:
        return _Plan(
            [mean],
            [
                f"{_named([mean])}, of the {len(points)} ranks at each step; rank lines left "
                "out to keep the chart within GitLab's 2,000 characters."
            ],
        )
    if len(points) > MAX_RANK_LINES:
        lines = [
            _Line("lowest rank", RANK_COLOURS[0], [min(col) for col in present]),
            _Line("highest rank", RANK_COLOURS[1], [max(col) for col in present]),
            mean,
        ]
        return _Plan(
            lines,
            [
                f"{_named(lines)} (on top): the lowest and highest value and the mean of the "
                f"{len(points)} ranks at each step."
            ],
        )
    lines = []
    left_out: list[str] = []
    for p, sampled in zip(points, per_rank, strict=True):
        if None in sampled:
            left_out.append(f"rank {p.rank} (steps {p.steps[0]}–{p.steps[-1]})")
        else:
            lines.append(_Line(f"rank {p.rank}", RANK_COLOURS[len(lines)], _full(sampled)))
    lines.append(mean)
    key = [_named(lines) + (" (on top)." if len(lines) > 1 else ".")]
    if left_out:
        key.append(
            f"Not drawn, having no points over part of the chart: {', '.join(left_out)}. "
            "The mean is over the ranks that logged each step."
        )
    return _Plan(lines, key)


def _full(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _named(lines: list[_Line]) -> str:
    """``Lines: rank 0 blue, mean grey``: the colour key Mermaid 10.7 does not draw."""
    named = ", ".join(f"{line.name} {line.colour.name}" for line in lines)
    return f"{'Line' if len(lines) == 1 else 'Lines'}: {named}"


# ----------------------------------------------------------------------------- source


def _decimals(span: float, finer: bool) -> int:
    """Decimal places that keep a value within 1/200 of the axis span (a pixel or two on
    GitLab's chart), or 1/2000 when ``finer``."""
    if span <= 0 or not math.isfinite(span):
        return 0
    return max(0, -math.floor(math.log10(span)) + (3 if finer else 2))


def _source(label: str, grid: Grid, plan: _Plan, axis: YAxis, finer: bool) -> str:
    lines = plan.lines
    low, high = axis.low, axis.high
    if low is None or high is None:
        values = [v for line in lines for v in line.values]
        span = axis.show(max(values)) - axis.show(min(values))
    else:
        span = axis.show(high) - axis.show(low)
    decimals = _decimals(span, finer)
    palette = ",".join(line.colour.hex for line in lines)
    out = [
        '%%{init:{"themeVariables":{"xyChart":{"plotColorPalette":"' + palette + '"}}}}%%',
        "xychart-beta",
    ]
    if grid.last - grid.first >= LINEAR_AXIS_SPAN:
        out.append(f'x-axis "step" {grid.first} --> {grid.last}')
    else:
        ticks = ", ".join(str(round(grid.step(k))) for k in range(grid.count))
        out.append(f'x-axis "step" [{ticks}]')
    y_axis = f'y-axis "{label}{axis.suffix}"'
    if low is not None and high is not None:
        shown_range = (chart_number(axis.show(v), decimals) for v in (low, high))
        y_axis += " {} --> {}".format(*shown_range)
    out.append(y_axis)
    for line in lines:
        shown = line.values
        if low is not None and high is not None:
            shown = [min(max(v, low), high) for v in shown]
        numbers = ",".join(chart_number(axis.show(v), decimals) for v in shown)
        out.append(f'line "{line.name}" [{numbers}]')
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- charts


def metric_chart(metric: MetricResult, budget: int = CHART_CHARS) -> Chart | None:
    """The chart of one metric within ``budget`` characters, or None when it has fewer than
    two steps to draw."""
    points = [_Points.of(s) for s in metric.series if s.points]
    union = sorted({step for p in points for step in p.steps})
    if len(union) < 2:
        return None
    label = mermaid_label(metric.name)
    grid = natural_grid(union, MAX_CHART_POINTS)
    # Fewer digits, then fewer points, then (only below MIN_CHART_POINTS) no rank lines.
    for ranks_drawn in (True, False) if len(points) > 1 else (True,):
        floor = min(grid.count, MIN_CHART_POINTS) if ranks_drawn and len(points) > 1 else 2
        count = grid.count
        while True:
            trial = Grid(grid.first, grid.last, count)
            if usable(trial, union):
                plan = _lines(points, trial, ranks_drawn)
                axis = y_axis([line.values for line in plan.lines], trial.count)
                for finer in (True, False):
                    source = _source(label, trial, plan, axis, finer)
                    if len(source) <= budget:
                        logged = max(s.count for s in metric.series)
                        return Chart(metric.name, source, _key(plan, axis, trial, logged))
                if count <= floor:
                    break
                # The values' share of the text shrinks about in proportion to the points.
                count = max(floor, min(count - 1, int(count * budget / len(source))))
            elif count <= floor:
                break
            else:
                count -= 1
    return None


def _key(plan: _Plan, axis: YAxis, grid: Grid, logged: int) -> str:
    key = list(plan.key)
    if axis.note:
        key.append(axis.note)
    if grid.count < logged:
        key.append(
            f"Sampled at {grid.count} evenly spaced steps (a rank logged up to {logged} points)."
        )
    return " ".join(key)


def charts(summary: MetricsSummary, budget: int = CHART_CHARS) -> list[Chart]:
    """The comment's charts: one per metric with two or more steps, at most
    :data:`MAX_CHARTS`, each within ``budget`` characters (the first is shown, the others
    go in a ``<details>`` each)."""
    result: list[Chart] = []
    for metric in summary.metrics:
        if len(result) >= MAX_CHARTS:
            break
        drawn = metric_chart(metric, budget)
        if drawn is not None:
            result.append(drawn)
    return result
