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
over the ranks that have that step. Axes: whole-number step ticks; a y range cut to the part
after the first steps when a first-steps spike would flatten the rest (said in the axis title);
a power of ten taken out of very large or small values, and a round number off values that
differ only in late digits (said in the axis title too).

Mermaid places the k-th of n values on a linear x axis at ``first + k * (last - first) / (n - 1)``
(11.x) or ``first + k * (last - first + 1) / n`` (10.7). The two agree when the grid is every
step; on a sampled or sparse grid 10.7 draws the points up to one grid spacing short of their
steps towards the right end. The axis is set for 11.x (10.7's drift stays under one spacing).
Up to at least 11.14 both make the positions with a floating-point loop that can stop one short,
dropping the last value (``xychartDb.ts`` ``transformDataWithoutCategory``, v10.7.0 and
mermaid@11.14.0 :143-152; 11.17 computes each from its index): the number of points is chosen
so that it does not.

GitLab ships Mermaid 10.7, which draws series in palette order and ignores their names: the
palette is set in the chart and each chart's :attr:`Chart.key` spells out which colour is which.
Pure: nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from ci_runner.results.markdown import clean
from ci_runner.results.metrics import MetricResult, MetricsSummary, RankSeries

# gitlabhq render_sandboxed_mermaid.js: MAX_CHAR_LIMIT = 2000 (a longer source is not drawn).
CHART_CHARS: Final = 2000
MAX_CHART_POINTS: Final = 100  # about one point every 6 pixels on GitLab's chart: more is not seen
MIN_CHART_POINTS: Final = 20  # fewer points than this: drop rank lines rather than points
MAX_CHARTS: Final = 4
MAX_RANK_LINES: Final = 4  # with more ranks: the mean and the lowest and highest rank at each step
LABEL_CHARS: Final = 60
# d3's scale.ticks() (10 ticks, what xychart-beta asks for) steps by 1 or more from a span of 8.
LINEAR_AXIS_SPAN: Final = 8
# A warm-up spike: at most the first 2 points or 5% of them (more is the learning curve) ...
FIRST_STEPS_SHARE: Final = 0.05
SPIKE_MIN_POINTS: Final = 10  # ... of a chart with this many points or more
SPIKE_RATIO: Final = 3.0  # cut the axis when the rest would fill less than a third of it
SCALE_ABOVE: Final = 1e5  # tick labels of 6+ digits ...
SCALE_BELOW: Final = 1e-2  # ... or 0.00x: take out a power of ten


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


def chart_number(value: float, decimals: int | None = None) -> str:
    """A plain decimal, which Mermaid's parser takes (no exponent): with ``decimals`` places,
    trailing zeros dropped, or 6 significant digits."""
    if decimals is None:
        text = f"{value:.6g}"
        if "e" in text:
            text = format(Decimal(text), "f")
        return text
    text = f"{value:.{max(decimals, 0)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


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


@dataclass(frozen=True)
class Grid:
    """``count`` evenly spaced steps from ``first`` to ``last`` (both real steps)."""

    first: int
    last: int
    count: int

    def step(self, k: int) -> float:
        return self.first + k * (self.last - self.first) / (self.count - 1)

    @property
    def whole(self) -> bool:
        """Whether every grid step is a whole step."""
        return (self.last - self.first) % (self.count - 1) == 0

    def sample(self, steps: Sequence[int], values: Sequence[float]) -> list[float | None]:
        """The value at the step nearest each grid step, within half a spacing (the later
        one on a tie); None where there is none. Integer arithmetic: steps can be huge."""
        span, gaps = self.last - self.first, self.count - 1
        out: list[float | None] = []
        for k in range(self.count):
            # Scaled by 2*gaps: grid step k sits at 2*k*span, the half spacing is span.
            at = bisect_left(steps, self.first + -(-k * span // gaps))
            best: tuple[int, int] | None = None  # (distance, -index)
            for i in (at - 1, at):
                if 0 <= i < len(steps):
                    distance = abs(2 * gaps * (steps[i] - self.first) - 2 * k * span)
                    if distance <= span and (best is None or (distance, -i) < best):
                        best = (distance, -i)
            out.append(None if best is None else values[-best[1]])
        return out


def natural_grid(steps: Sequence[int], limit: int) -> Grid:
    """Every step of the steps' own spacing when there are at most ``limit``, else ``limit``
    evenly spaced ones; fewer where ``steps`` (sorted, distinct, two or more) are irregular,
    so that every grid step has a logged step near it."""
    first, last = steps[0], steps[-1]
    spacing = 0
    for step in steps:
        spacing = math.gcd(spacing, step - first)
    grid = Grid(first, last, min((last - first) // spacing + 1, limit))
    while not _usable(grid, steps):
        grid = Grid(first, last, grid.count - 1)  # two grid steps always qualify
    return grid


def _usable(grid: Grid, steps: Sequence[int]) -> bool:
    """Whether ``grid`` can be drawn and every grid step has one of ``steps`` near it."""
    return _drawable(grid) and None not in grid.sample(steps, [0.0] * len(steps))


def _drawable(grid: Grid) -> bool:
    """Whether the x axis has whole-number ticks (a linear axis spans enough steps for d3's
    ticks to be whole; a shorter one is a band axis labelled with the grid steps) and, on a
    linear axis, both Mermaid versions place every value."""
    if grid.last - grid.first < LINEAR_AXIS_SPAN:
        return grid.whole
    return all(
        _positions(grid.first, grid.last, step) == grid.count
        for step in (
            (grid.last - grid.first) / (grid.count - 1),  # 11.x
            (grid.last - grid.first + 1) / grid.count,  # 10.7
        )
    )


def _positions(first: int, last: int, step: float) -> int:
    """How many x positions Mermaid 10.7 / 11.14 makes for a line (``for (let i = min; i <=
    max; i += step)``, in the same doubles as JavaScript's): a value past them is not drawn."""
    count, at = 0, float(first)
    while at <= last:
        count += 1
        at += step
    return count


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


# ----------------------------------------------------------------------------- y axis


LOWEST_EXPONENT: Final = -306  # 1e-306 is still a normal float; a multiple of 3, as exponents are


@dataclass(frozen=True)
class _Axis:
    """The y axis: range (None: Mermaid's own, from the data), what is taken off the values
    and the power of ten they are shown in, the title's suffix and the key's note."""

    low: float | None
    high: float | None
    offset: float
    exponent: int
    suffix: str
    note: str | None

    def show(self, value: float) -> float:
        return (value - self.offset) / 10.0**self.exponent


def _round_to(value: float, quantum: float, up: bool) -> float:
    scaled = value / quantum
    return (math.ceil(scaled) if up else math.floor(scaled)) * quantum


def _y_axis(lines: list[_Line], grid: Grid) -> _Axis:
    values = [v for line in lines for v in line.values]
    low, high = min(values), max(values)
    cut_low = cut_high = None
    if low == high:  # Mermaid would squash the axis to one tick: give it room around it
        room = abs(low) / 10 or 1.0
        cut_low, cut_high = low - room, high + room
    elif grid.count >= SPIKE_MIN_POINTS:
        # The fewest first points whose leaving out lets the rest fill a third of the axis.
        for skip in range(1, max(2, math.ceil(grid.count * FIRST_STEPS_SHARE)) + 1):
            rest = [v for line in lines for v in line.values[skip:]]
            rest_low, rest_high = min(rest), max(rest)
            rest_span = rest_high - rest_low
            if high - low > SPIKE_RATIO * rest_span:
                break
        if rest_span > 0 and high - low > SPIKE_RATIO * rest_span:
            quantum = 10.0 ** (math.floor(math.log10(rest_span)) - 1)
            margin = rest_span / 20
            if high > rest_high + margin:
                cut_high = _round_to(rest_high + margin, quantum, up=True)
                if low >= rest_low - margin:
                    cut_low = _round_to(low, quantum, up=False)
            if low < rest_low - margin:
                cut_low = _round_to(rest_low - margin, quantum, up=False)
                if cut_high is None:
                    cut_high = _round_to(high, quantum, up=True)
    shown_low = low if cut_low is None else cut_low
    shown_high = high if cut_high is None else cut_high
    # Values far from zero that differ only in late digits: show them less a round number.
    offset = 0.0
    span = shown_high - shown_low
    if (
        span > 0
        and shown_low * shown_high > 0
        and min(abs(shown_low), abs(shown_high)) > 1e3 * span
    ):
        offset = _round_to(shown_low, 10.0 ** math.ceil(math.log10(span)), up=False)
    largest = max(abs(shown_low - offset), abs(shown_high - offset))
    exponent = 0
    if largest >= SCALE_ABOVE or 0 < largest < SCALE_BELOW:
        # Subnormal values (down to 5e-324) would need a power of ten that underflows to 0.
        exponent = max(LOWEST_EXPONENT, 3 * math.floor(math.log10(largest) / 3))
    parts = (
        [f"minus {chart_number(offset, max(0, -math.floor(math.log10(span))))}"] if offset else []
    )
    parts += [f"×1e{exponent}"] if exponent else []
    axis = _Axis(cut_low, cut_high, offset, exponent, "", None)
    if low == high or (cut_low is None and cut_high is None):
        return _Axis(cut_low, cut_high, offset, exponent, _suffix(parts), None)
    top = cut_high is not None and high > cut_high
    bottom = cut_low is not None and low < cut_low
    if top and not bottom:
        parts.append(f"cut at {_short(axis.show(shown_high))}")
        note = (
            f"The axis is cut at {_short(axis.show(shown_high))}: higher values of the first "
            f"steps (up to {_short(axis.show(high))}) are drawn at its top."
        )
    elif bottom and not top:
        parts.append(f"cut at {_short(axis.show(shown_low))}")
        note = (
            f"The axis is cut at {_short(axis.show(shown_low))}: lower values of the first "
            f"steps (down to {_short(axis.show(low))}) are drawn at its bottom."
        )
    else:
        limits = f"{_short(axis.show(shown_low))}..{_short(axis.show(shown_high))}"
        parts.append(f"cut to {limits}")
        note = (
            f"The axis is cut to {limits}: values of the first steps beyond it "
            f"({_short(axis.show(low))} to {_short(axis.show(high))}) are drawn at its edges."
        )
    return _Axis(shown_low, shown_high, offset, exponent, _suffix(parts), note)


def _suffix(parts: list[str]) -> str:
    return f" ({'; '.join(parts)})" if parts else ""


def _short(value: float) -> str:
    """A number for people: 4 significant digits, no exponent."""
    text = f"{value:.4g}"
    return format(Decimal(text), "f") if "e" in text else text


# ----------------------------------------------------------------------------- source


def _decimals(span: float, finer: bool) -> int:
    """Decimal places that keep a value within 1/200 of the axis span (a pixel or two on
    GitLab's chart), or 1/2000 when ``finer``."""
    if span <= 0 or not math.isfinite(span):
        return 0
    return max(0, -math.floor(math.log10(span)) + (3 if finer else 2))


def _source(label: str, grid: Grid, plan: _Plan, axis: _Axis, finer: bool) -> str:
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
            if _usable(trial, union):
                plan = _lines(points, trial, ranks_drawn)
                axis = _y_axis(plan.lines, trial)
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


def _key(plan: _Plan, axis: _Axis, grid: Grid, logged: int) -> str:
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
