"""ci_runner.results.rank_series: one rank's points kept evenly spread within its share, with
the count, the last point and the value at the highest step exact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ci_runner.results.rank_series import RankSeries, SeriesState


def test_a_full_series_keeps_every_other_point_and_always_the_last() -> None:
    state = SeriesState(4)
    for step in range(10):
        state.add(step, float(step))

    assert (state.stride, state.points) == (4, [(0, 0.0), (4, 4.0), (8, 8.0)])
    assert state.freeze(3) == RankSeries(3, 10, 9, 9.0, ((0, 0.0), (4, 4.0), (8, 8.0), (9, 9.0)))


def test_a_smaller_share_halves_what_is_kept() -> None:
    state = SeriesState(8)
    for step in range(8):
        state.add(step, 1.0)
    state.shrink(2)

    assert (state.stride, [step for step, _ in state.points]) == (4, [0, 4])


def test_the_value_at_the_highest_step_is_the_last_logged_there() -> None:
    state = SeriesState(8)
    for step, value in ((5, 1.0), (2, 2.0), (5, 3.0), (1, 4.0)):
        state.add(step, value)

    assert (state.max_step, state.value_at_max) == (5, 3.0)


@given(
    blocks=st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=40), max_size=6),
    capacity=st.integers(1, 9),
)
def test_a_block_at_a_time_keeps_what_one_at_a_time_keeps(
    blocks: list[list[int]], capacity: int
) -> None:
    one, many = SeriesState(capacity), SeriesState(capacity)
    for block in blocks:
        values = [step / 2 for step in block]
        for step, value in zip(block, values, strict=True):
            one.add(step, value)
        many.add_block(block, values)

    assert many.freeze(0) == one.freeze(0)
    assert (many.stride, many.max_step, many.value_at_max) == (
        one.stride,
        one.max_step,
        one.value_at_max,
    )
