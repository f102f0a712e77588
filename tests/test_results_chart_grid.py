"""ci_runner.results.chart_grid: the steps a chart is drawn at, each logged, and every value of
them drawn by both Mermaid versions."""

from __future__ import annotations

import pytest

from ci_runner.results.chart_grid import Grid, natural_grid


def _mermaid_positions(first: int, last: int, step: float) -> int:
    """xychartDb.ts transformDataWithoutCategory (v10.7.0, mermaid@11.14.0 :148):
    ``for (let i = min; i <= max; i += step)``."""
    count, at = 0, float(first)
    while at <= last:
        count, at = count + 1, at + step
    return count


@pytest.mark.parametrize("last", [19, 99, 1999, 99_910, 99_999, 123_457])
def test_no_grid_that_mermaid_draws_short(last: int) -> None:
    # Mermaid 11.14 steps by (max - min) / (n - 1), 10.7 by (max - min + 1) / n, in doubles:
    # 0 --> 99999 with 100 values gives 11.14 only 99 positions, and the last value is lost.
    assert _mermaid_positions(0, 99_999, 99_999 / 99) == 99
    grid = natural_grid([*range(0, last, 7), last], 100)

    assert _mermaid_positions(0, last, last / (grid.count - 1)) == grid.count
    assert _mermaid_positions(0, last, (last + 1) / grid.count) == grid.count


def test_grid_sample_takes_the_nearest_point_within_half_a_spacing_later_on_a_tie() -> None:
    grid = Grid(0, 10, 3)  # 0, 5, 10; half spacing 2.5

    assert grid.sample([0, 2, 4, 7, 8, 10], [0, 2, 4, 7, 8, 10]) == [0, 4, 10]
    assert grid.sample([0, 4, 6, 10], [0, 4, 6, 10]) == [0, 6, 10]  # 4 and 6: the later
    assert grid.sample([0, 10], [0, 10]) == [0, None, 10]
    assert grid.sample([0, 7, 8, 9, 10], [0, 7, 8, 9, 10]) == [0, 7, 10]


def test_grid_sample_is_exact_with_huge_steps() -> None:
    big = 10**17
    grid = Grid(big, big + 2, 3)

    assert grid.sample([big, big + 1, big + 2], [1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
