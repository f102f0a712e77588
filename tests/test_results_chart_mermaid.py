"""Every chart the comment can hold, drawn by the real Mermaid as GitLab draws it.

Mermaid 10.7.0 (what GitLab ships) and the newest 11.x, in headless Chromium, initialised as
GitLab's sandbox page does, in GitLab's light (``neutral``) and dark (``dark``) themes. Each
chart parses and draws: the palette it sets, one path per series with a point per value,
whole-number step ticks that do not overlap, every point inside the plot, the axis title it
says, the series names as the legend (11.x) and, for 10.7 which draws no legend, the colour
key in the comment naming each series with its colour. The comments themselves pass GitLab's
auto-draw rule (testing/fake_gitlab/mermaid.py). Needs ``make mermaid``; nothing is fetched here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from ci_runner.backends.result import Outcome
from ci_runner.config.types import Goal, MetricSpec
from ci_runner.context import CIContext
from ci_runner.results.chart import CHART_CHARS, MEAN_COLOUR, RANK_COLOURS, Chart, charts
from ci_runner.results.metrics import MetricsSummary, parse_metrics
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import render_report
from testing.fake_gitlab.mermaid import diagrams
from testing.mermaid.browser import GITLAB_MERMAID, MERMAID_VERSIONS, THEMES, missing_tools, probe

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parent / "golden"
BACKGROUNDS = {"neutral": "#ffffff", "dark": "#333"}  # Mermaid's xyChart.backgroundColor
COLOUR_NAMES = {c.hex: c.name for c in (MEAN_COLOUR, *RANK_COLOURS)}
CTX = CIContext(sha="0123456789abcdef0123456789abcdef01234567", project_path="g/p")


def _log(ranks: Mapping[int, Iterable[tuple[int, float]]], names: Iterable[str]) -> list[str]:
    return [
        f"[{rank}]<stdout>:{name} {step} {value + i!r}"
        for rank, points in ranks.items()
        for step, value in points
        for i, name in enumerate(names)
    ]


def _summary(
    ranks: Mapping[int, Iterable[tuple[int, float]]],
    names: tuple[str, ...] = ("loss",),
    goal: Goal = "min",
) -> MetricsSummary:
    specs = [
        MetricSpec(n, re.compile(rf"{re.escape(n)} (?P<step>\d+) (?P<value>\S+)"), goal)
        for n in names
    ]
    points = {rank: list(p) for rank, p in ranks.items()}
    return parse_metrics(_log(points, names), specs)


def _curve(ranks: int, steps: int, every: int = 1) -> dict[int, list[tuple[int, float]]]:
    return {
        r: [(s, 1000 / (s + 1) + 3 * r + (s * 7919 + r) % 13) for s in range(0, steps, every)]
        for r in range(ranks)
    }


def _cases() -> dict[str, MetricsSummary]:
    cases: dict[str, MetricsSummary] = {}
    for ranks in (1, 2, 4, 8):
        for metrics in (1, 2, 3):
            names = ("train_loss", "val_loss", "accuracy")[:metrics]
            for steps in (20, 2000):
                cases[f"{ranks} ranks x {metrics} metrics x {steps} steps"] = _summary(
                    _curve(ranks, steps), names
                )
    cases["100000 steps"] = _summary(
        {r: [*points, (99_999, 2.0 + r)] for r, points in _curve(2, 100_000, every=97).items()}
    )
    cases["stopped early"] = _summary(
        {0: [(s, 10.0 - s / 10) for s in range(100)], 1: [(s, 9.0 - s / 10) for s in range(40)]}
    )
    cases["started late"] = _summary(
        {
            0: [(s, 10.0 - s / 10) for s in range(100)],
            1: [(s, 9.0 - s / 10) for s in range(30, 100)],
        }
    )
    cases["warm-up spike"] = _summary({0: [(s, 5.0 + 900 * (s < 2) - s / 100) for s in range(60)]})
    cases["low start"] = _summary(
        {0: [(s, 0.95 - 0.8 * (s < 3) + s / 10000) for s in range(60)]}, ("accuracy",), "max"
    )
    cases["tiny values"] = _summary({0: [(s, 3e-7 * (1 + 1 / (s + 1))) for s in range(50)]})
    cases["huge values"] = _summary({0: [(s, 4e9 - 1e7 * s) for s in range(50)]})
    cases["negative"] = _summary(
        {0: [(s, -2.5 + s / 7) for s in range(40)], 1: [(s, -1.5 + s / 9) for s in range(40)]}
    )
    cases["constant"] = _summary({0: [(s, 0.25) for s in range(12)]})
    cases["two steps"] = _summary({0: [(18, 472.4), (19, 443.1)], 1: [(18, 501.9), (19, 441.0)]})
    cases["sparse"] = _summary(
        {r: [(s, 50 / (s + 1) + r) for s in range(0, 1000, 50)] for r in range(2)}
    )
    cases["irregular"] = _summary({0: [(0, 1.0), (1, 0.8), (2, 0.7), (3, 0.65), (7, 0.6)]})
    cases["offset digits"] = _summary(
        {r: [(s, 1e9 + r + (s % 17) / 1000) for s in range(0, 100_000, 97)] for r in range(4)}
    )
    cases["hostile name"] = _summary(
        {0: [(s, 1.0 / (s + 1)) for s in range(30)]}, ('x" @all <b>%%{init}%% ]]\n-->',)
    )
    return cases


@dataclass(frozen=True)
class Case:
    name: str
    body: str
    charts: list[Chart]


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    found = []
    for name, summary in _cases().items():
        report = ReportInput(Outcome.SUCCEEDED, "case", CTX, "case-job", metrics=summary)
        found.append(Case(name, render_report(report), charts(summary)))
    for golden in sorted(GOLDEN.glob("*.md")):
        body = golden.read_text(encoding="utf-8")
        if "```mermaid" in body:  # running.md has no chart yet
            found.append(Case(golden.name, body, []))
    return found


@pytest.fixture(scope="module")
def sources(cases: list[Case]) -> list[tuple[str, str, str]]:
    """(case name, chart source, the colour key under it) for every chart of every case."""
    found: list[tuple[str, str, str]] = []
    for case in cases:
        for diagram in diagrams(case.body):
            after = case.body.split(f"```mermaid\n{diagram.source}```\n\n", 1)[1]
            key = re.match(r"_(.*)_\n", after)
            assert key is not None, case.name
            found.append((case.name, diagram.source, key.group(1)))
    return found


def test_the_comments_pass_gitlabs_auto_draw_rule(cases: list[Case]) -> None:
    for case in cases:
        found = diagrams(case.body)
        assert found, case.name
        assert all(d.drawn for d in found), case.name
        assert found[0].details is None, case.name  # the first metric's chart is shown
        assert [d.details for d in found[1:]] == list(range(len(found) - 1)), case.name
        assert all(len(d.source) <= CHART_CHARS for d in found), case.name
        if case.charts:
            assert [d.source for d in found] == [c.source for c in case.charts], case.name


_LINE = re.compile(r'line "([^"]*)" \[([^\]]*)\]')
_PALETTE = re.compile(r'"plotColorPalette":"([^"]*)"')
_Y_TITLE = re.compile(r'^y-axis "([^"]*)"', re.MULTILINE)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("version", MERMAID_VERSIONS)
def test_every_chart_draws_as_gitlab_draws_it(
    version: str, theme: str, sources: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    problem = missing_tools()
    if problem:
        pytest.fail(problem)
    drawings = probe([source for _, source, _ in sources], version, theme, tmp_path)

    assert len(drawings) == len(sources)
    for (case, source, key), drawn in zip(sources, drawings, strict=True):
        where = f"{case}, Mermaid {version}, {theme}:\n{source}"
        assert drawn.error is None, f"{drawn.error}: {where}"
        assert drawn.background == BACKGROUNDS[theme], where
        series = _LINE.findall(source)
        palette = _PALETTE.search(source)
        assert palette is not None, where
        assert list(drawn.strokes) == palette.group(1).split(","), where
        assert [len(p) for p in drawn.points] == [len(v.split(",")) for _, v in series], where
        for points in drawn.points:
            assert all(math.isfinite(x) and math.isfinite(y) for x, y in points), where
            assert [x for x, _ in points] == sorted({x for x, _ in points}), where
            assert drawn.y_axis is not None, where
            top, bottom = drawn.y_axis
            assert all(top - 0.5 <= y <= bottom + 0.5 for _, y in points), where
        assert drawn.x_ticks and all(re.fullmatch(r"-?\d+", t) for t in drawn.x_ticks), where
        boxes = drawn.x_tick_boxes
        assert all(a[2] <= b[0] + 0.5 for a, b in pairwise(boxes)), f"overlap: {where}"
        title = _Y_TITLE.search(source)
        assert title is not None and drawn.y_title == (title.group(1),), where
        assert drawn.svg_box is not None, where
        for box in drawn.y_title_boxes:
            assert drawn.svg_box[1] - 0.5 <= box[1] and box[3] <= drawn.svg_box[3] + 0.5, where
        names = [name for name, _ in series]
        if version == GITLAB_MERMAID:
            # Mermaid 10.7 draws no legend: the comment's key names each series' colour.
            assert drawn.legend == (), where
            named = ", ".join(
                f"{name} {COLOUR_NAMES[colour]}"
                for name, colour in zip(names, drawn.strokes, strict=True)
            )
            assert key.startswith(("Line: ", "Lines: ")), where
            assert key.split(": ", 1)[1].startswith(named), f"{key}: {where}"
        else:
            assert list(drawn.legend) == names, where
