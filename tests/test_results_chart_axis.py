"""ci_runner.results.chart_axis: the y axis's range, cut, offset and power of ten, and the
numbers written on it."""

from __future__ import annotations

import pytest

from ci_runner.results.chart_axis import YAxis, chart_number, y_axis


def test_chart_number() -> None:
    assert chart_number(1e-07) == "0.0000001"
    assert chart_number(-2.5e20) == "-250000000000000000000"
    assert chart_number(443.1262107366988) == "443.126"
    assert chart_number(443.1262107366988, 1) == "443.1"
    assert chart_number(2.0, 3) == "2"
    assert chart_number(-0.0001, 2) == "0"
    assert chart_number(1234.5, 0) == "1234"


def test_a_spike_of_the_first_steps_is_cut_off_and_said_so() -> None:
    values = [1000.0, *(10.0 + step / 100 for step in range(1, 20))]

    axis = y_axis([values], len(values))

    assert (axis.low, axis.high) == pytest.approx((10.01, 10.2))
    assert (axis.offset, axis.exponent, axis.suffix) == (0.0, 0, " (cut at 10.2)")
    assert axis.note == (
        "The axis is cut at 10.2: higher values of the first steps (up to 1000) are drawn at "
        "its top."
    )
    assert y_axis([values[:9]], 9).low is None  # too few points to tell a spike


def test_a_constant_gets_room_and_large_values_a_power_of_ten() -> None:
    assert y_axis([[0.5, 0.5], [0.5, 0.5]], 2) == YAxis(0.45, 0.55, 0.0, 0, "", None)
    assert y_axis([[2e6, 3e6]], 2) == YAxis(None, None, 0.0, 6, " (×1e6)", None)
    assert y_axis([[1e9, 1e9 + 0.02]], 2) == YAxis(None, None, 1e9, 0, " (minus 1000000000)", None)
