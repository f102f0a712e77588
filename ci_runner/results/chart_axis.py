"""The y axis of a metric chart, and the numbers written on it.

A y range cut to the part after the first steps when a first-steps spike would flatten the rest
(said in the axis title and the chart's key); room around a constant value; a power of ten taken
out of very large or small values, and a round number off values that differ only in late
digits (said in the axis title too). Numbers are plain decimals, which Mermaid's parser takes.
Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

# A warm-up spike: at most the first 2 points or 5% of them (more is the learning curve) ...
FIRST_STEPS_SHARE: Final = 0.05
SPIKE_MIN_POINTS: Final = 10  # ... of a chart with this many points or more
SPIKE_RATIO: Final = 3.0  # cut the axis when the rest would fill less than a third of it
SCALE_ABOVE: Final = 1e5  # tick labels of 6+ digits ...
SCALE_BELOW: Final = 1e-2  # ... or 0.00x: take out a power of ten
LOWEST_EXPONENT: Final = -306  # 1e-306 is still a normal float; a multiple of 3, as exponents are


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


@dataclass(frozen=True)
class YAxis:
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


def y_axis(lines: Sequence[Sequence[float]], count: int) -> YAxis:
    """The axis for ``lines`` (each ``count`` values, one a grid step)."""
    values = [v for line in lines for v in line]
    low, high = min(values), max(values)
    cut_low, cut_high = _cuts(lines, count, low, high)
    shown_low = low if cut_low is None else cut_low
    shown_high = high if cut_high is None else cut_high
    offset, exponent = _scale(shown_low, shown_high)
    span = shown_high - shown_low
    parts = (
        [f"minus {chart_number(offset, max(0, -math.floor(math.log10(span))))}"] if offset else []
    )
    parts += [f"×1e{exponent}"] if exponent else []
    if low == high or (cut_low is None and cut_high is None):
        return YAxis(cut_low, cut_high, offset, exponent, _suffix(parts), None)
    top = cut_high is not None and high > cut_high
    bottom = cut_low is not None and low < cut_low
    shown = YAxis(cut_low, cut_high, offset, exponent, "", None).show
    if top and not bottom:
        parts.append(f"cut at {_short(shown(shown_high))}")
        note = (
            f"The axis is cut at {_short(shown(shown_high))}: higher values of the first "
            f"steps (up to {_short(shown(high))}) are drawn at its top."
        )
    elif bottom and not top:
        parts.append(f"cut at {_short(shown(shown_low))}")
        note = (
            f"The axis is cut at {_short(shown(shown_low))}: lower values of the first "
            f"steps (down to {_short(shown(low))}) are drawn at its bottom."
        )
    else:
        limits = f"{_short(shown(shown_low))}..{_short(shown(shown_high))}"
        parts.append(f"cut to {limits}")
        note = (
            f"The axis is cut to {limits}: values of the first steps beyond it "
            f"({_short(shown(low))} to {_short(shown(high))}) are drawn at its edges."
        )
    return YAxis(shown_low, shown_high, offset, exponent, _suffix(parts), note)


def _cuts(
    lines: Sequence[Sequence[float]], count: int, low: float, high: float
) -> tuple[float | None, float | None]:
    """Where the axis is cut (None: at the data's own end): around a constant value, which
    Mermaid would squash to one tick, or past a spike of the first steps."""
    if low == high:
        room = abs(low) / 10 or 1.0
        return low - room, high + room
    if count < SPIKE_MIN_POINTS:
        return None, None
    # The fewest first points whose leaving out lets the rest fill a third of the axis.
    for skip in range(1, max(2, math.ceil(count * FIRST_STEPS_SHARE)) + 1):
        rest = [v for line in lines for v in line[skip:]]
        rest_low, rest_high = min(rest), max(rest)
        rest_span = rest_high - rest_low
        if high - low > SPIKE_RATIO * rest_span:
            break
    if not (rest_span > 0 and high - low > SPIKE_RATIO * rest_span):
        return None, None
    quantum = 10.0 ** (math.floor(math.log10(rest_span)) - 1)
    margin = rest_span / 20
    cut_low = cut_high = None
    if high > rest_high + margin:
        cut_high = _round_to(rest_high + margin, quantum, up=True)
        if low >= rest_low - margin:
            cut_low = _round_to(low, quantum, up=False)
    if low < rest_low - margin:
        cut_low = _round_to(rest_low - margin, quantum, up=False)
        if cut_high is None:
            cut_high = _round_to(high, quantum, up=True)
    return cut_low, cut_high


def _scale(low: float, high: float) -> tuple[float, int]:
    """What is taken off the values shown from ``low`` to ``high`` (values far from zero that
    differ only in late digits: a round number), and the power of ten they are shown in."""
    offset = 0.0
    span = high - low
    if span > 0 and low * high > 0 and min(abs(low), abs(high)) > 1e3 * span:
        offset = _round_to(low, 10.0 ** math.ceil(math.log10(span)), up=False)
    largest = max(abs(low - offset), abs(high - offset))
    exponent = 0
    if largest >= SCALE_ABOVE or 0 < largest < SCALE_BELOW:
        # Subnormal values (down to 5e-324) would need a power of ten that underflows to 0.
        exponent = max(LOWEST_EXPONENT, 3 * math.floor(math.log10(largest) / 3))
    return offset, exponent


def _round_to(value: float, quantum: float, up: bool) -> float:
    scaled = value / quantum
    return (math.ceil(scaled) if up else math.floor(scaled)) * quantum


def _suffix(parts: list[str]) -> str:
    return f" ({'; '.join(parts)})" if parts else ""


def _short(value: float) -> str:
    """A number for people: 4 significant digits, no exponent."""
    text = f"{value:.4g}"
    return format(Decimal(text), "f") if "e" in text else text
