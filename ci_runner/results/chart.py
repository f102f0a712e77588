"""The metric charts of the comment: Mermaid ``xychart-beta`` line charts, pure.

:func:`charts` turns the parsed metrics into the values the comment template draws; the
series sampling, the number format and the label sanitising live here too. Labels are made
safe for a quoted Mermaid string on their own (:func:`mermaid_label`), so this module needs
nothing from the Markdown escaping of the rest of the comment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ci_runner.results.metrics import MetricsSummary, RankSeries

MAX_CHART_POINTS = 100
MAX_CHARTS = 4
MAX_RANK_LINES = 4  # with more ranks than this, the chart shows only the mean
LABEL_CHARS = 60

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_SPACE = re.compile(r"\r\n|[\n\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e]")


def mermaid_label(text: str, limit: int = LABEL_CHARS) -> str:
    """Text safe inside a quoted Mermaid label: letters, digits and a few marks only (ANSI
    codes dropped, line breaks and control characters as spaces, cut to ``limit``)."""
    text = _SPACE.sub(" ", _ANSI.sub("", text))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    cleaned = re.sub(r"[^\w .:/()+-]", "_", text, flags=re.UNICODE)
    return cleaned.strip() or "metric"


def chart_number(value: float) -> str:
    """A plain decimal (no exponent, which Mermaid's parser does not take)."""
    text = f"{value:.6g}"
    if "e" in text:
        text = format(Decimal(text), "f")
    return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _sample(points: tuple[tuple[int, float], ...], grid: Sequence[float]) -> list[float]:
    """The series' value at each grid step (last point at or before it; first point before)."""
    values: list[float] = []
    i = 0
    for step in grid:
        while i + 1 < len(points) and points[i + 1][0] <= step:
            i += 1
        values.append(points[i][1])
    return values


def _chart_series(series: tuple[RankSeries, ...]) -> tuple[list[float], list[list[float]]]:
    """(grid of at most MAX_CHART_POINTS steps, per-rank values on that grid)."""
    ordered = [tuple(sorted(s.points)) for s in series]
    low = min(p[0][0] for p in ordered)
    high = max(p[-1][0] for p in ordered)
    if high - low + 1 <= MAX_CHART_POINTS:
        grid = [float(s) for s in range(low, high + 1)]
    else:
        grid = [low + (high - low) * i / (MAX_CHART_POINTS - 1) for i in range(MAX_CHART_POINTS)]
    return grid, [_sample(points, grid) for points in ordered]


def charts(summary: MetricsSummary) -> list[dict[str, Any]]:
    """The charts of the comment, one per metric with at least two steps (at most
    :data:`MAX_CHARTS`); ``metric`` is the metric's name as parsed, for the caller to show."""
    result: list[dict[str, Any]] = []
    for metric in summary.metrics:
        if len(result) >= MAX_CHARTS:
            break
        steps = {p[0] for s in metric.series for p in s.points}
        if len(steps) < 2:
            continue
        grid, per_rank = _chart_series(metric.series)
        mean = [math.fsum(col) / len(col) for col in zip(*per_rank, strict=True)]
        lines = [mean]
        legend = f"mean over {_plural(len(per_rank), 'rank')}"
        if 1 < len(per_rank) <= MAX_RANK_LINES:
            lines += per_rank
            ranks = ", ".join(f"rank {s.rank}" for s in metric.series)
            legend = f"lines: {legend} (first), then {ranks}"
        label = mermaid_label(metric.name)
        result.append(
            {
                "metric": metric.name,
                "title": label,
                "x_axis": f'"step" {round(grid[0])} --> {round(grid[-1])}',
                "y_axis": f'"{label}"',
                "lines": ["[" + ", ".join(chart_number(v) for v in line) + "]" for line in lines],
                "legend": legend,
            }
        )
    return result
