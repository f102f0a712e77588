"""The x axis of a metric chart: the grid of steps a chart is drawn at, and which grids Mermaid
draws whole.

Mermaid places the k-th of n values on a linear x axis at ``first + k * (last - first) / (n - 1)``
(11.x) or ``first + k * (last - first + 1) / n`` (10.7). The two agree when the grid is every
step; on a sampled or sparse grid 10.7 draws the points up to one grid spacing short of their
steps towards the right end. The axis is set for 11.x (10.7's drift stays under one spacing).
Up to at least 11.14 both make the positions with a floating-point loop that can stop one short,
dropping the last value (``xychartDb.ts`` ``transformDataWithoutCategory``, v10.7.0 and
mermaid@11.14.0 :143-152; 11.17 computes each from its index): the number of points is chosen
so that it does not. Pure.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

# d3's scale.ticks() (10 ticks, what xychart-beta asks for) steps by 1 or more from a span of 8.
LINEAR_AXIS_SPAN: Final = 8


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
    while not usable(grid, steps):
        grid = Grid(first, last, grid.count - 1)  # two grid steps always qualify
    return grid


def usable(grid: Grid, steps: Sequence[int]) -> bool:
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
