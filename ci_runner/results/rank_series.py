"""One rank's points of one metric, kept as the log streams by in bounded memory.

A rank keeps every ``stride``-th point, the stride the smallest power of two that fits its share
of the metric's points (its ``capacity``), always with its last point: evenly spread whatever
the log's length, and depending on the rank's count and capacity only, not on the order points
come in. The count, the last point and the value at the highest step stay exact. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RankSeries:
    """One rank's points of one metric: exact count and last point, decimated ``points``."""

    rank: int
    count: int
    last_step: int
    last_value: float
    points: tuple[tuple[int, float], ...]  # (step, value), ascending by arrival, ends at last


class SeriesState:
    """One rank's points of one metric as they come: the exact count, last point and highest
    step, and every ``stride``-th point, at most ``capacity`` of them."""

    __slots__ = (
        "capacity",
        "count",
        "last_step",
        "last_value",
        "max_step",
        "points",
        "stride",
        "value_at_max",
    )

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self.stride = 1
        self.points: list[tuple[int, float]] = []
        self.last_step = 0
        self.last_value = 0.0
        self.max_step = -(2**63)
        self.value_at_max = 0.0

    def shrink(self, capacity: int) -> None:
        """Keep at most ``capacity`` points (a new rank took part of the metric's)."""
        self.capacity = capacity
        while len(self.points) > capacity:
            self.points = self.points[::2]
            self.stride *= 2

    def add(self, step: int, value: float) -> None:
        if self.count % self.stride == 0:
            if len(self.points) >= self.capacity:
                self.points = self.points[::2]
                self.stride *= 2
            if self.count % self.stride == 0:
                self.points.append((step, value))
        self.count += 1
        self.last_step, self.last_value = step, value
        if step >= self.max_step:
            self.max_step, self.value_at_max = step, value

    def add_block(self, steps: Sequence[int], values: Sequence[float]) -> None:
        """:meth:`add` of each point in turn, with the work done on the points kept only."""
        first, count = self.count, len(values)
        position = 0
        while True:
            # The next point whose number (first + index) the stride divides.
            index = position + (-(first + position)) % self.stride
            if index >= count:
                break
            if len(self.points) >= self.capacity:
                self.points = self.points[::2]
                self.stride *= 2
                if (first + index) % self.stride:
                    position = index + 1
                    continue
            kept = range(index, count, self.stride)[: self.capacity - len(self.points)]
            self.points += [(steps[i], values[i]) for i in kept]
            position = kept[-1] + 1
        self.count = first + count
        self.last_step, self.last_value = steps[-1], values[-1]
        top = max(steps)
        if top >= self.max_step:
            # The last point with that step wins, as in add().
            at = count - 1 - list(reversed(steps)).index(top)
            self.max_step, self.value_at_max = top, values[at]

    def freeze(self, rank: int) -> RankSeries:
        points = self.points
        if not points or points[-1] != (self.last_step, self.last_value):
            points = [*points, (self.last_step, self.last_value)]
        return RankSeries(rank, self.count, self.last_step, self.last_value, tuple(points))
