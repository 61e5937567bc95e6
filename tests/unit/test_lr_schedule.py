"""The learning-rate schedule across extensions of a run (pure domain, with the cookbook's multipliers)."""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tinker_cookbook.utils.lr_scheduling import compute_schedule_lr_multiplier

from app.usecases.steps import TrainingSettings
from domain.lr_schedule import extend_schedule, scheduled_multiplier

SHAPES = ("linear", "cosine", "constant")


def shape(name: str) -> functools.partial[float]:
    return functools.partial(compute_schedule_lr_multiplier, name)


def test_extending_a_finished_linear_run_continues_from_its_last_rate_without_a_jump() -> None:
    """The reported case: 8 batches at 0.01, linear, extended to 12 (was 0.00333 at step 8)."""
    settings = TrainingSettings(log_path="run", learning_rate=0.01, lr_schedule=shape("linear"))
    first = [settings.rate_at(step, 8) for step in range(8)]
    schedule = extend_schedule(extend_schedule((), 8), 12)
    assert schedule == (8, 12)
    rates = [settings.rate_at(step, schedule) for step in range(12)]

    assert rates[:8] == first  # the batches already trained keep their rates
    assert rates[7] == pytest.approx(0.00125)
    assert rates[8:] == pytest.approx([0.00125, 0.00125 * 0.75, 0.00125 * 0.5, 0.00125 * 0.25])


def test_a_run_planning_no_more_batches_keeps_its_schedule() -> None:
    assert extend_schedule((8,), 8) == (8,)
    assert extend_schedule((8,), 6) == (8,)  # a shorter rerun stops earlier on the schedule it has
    assert extend_schedule((8, 12), 16) == (8, 12, 16)


@given(
    name=st.sampled_from(SHAPES),
    ends=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=4).map(
        lambda lengths: tuple(sum(lengths[: i + 1]) for i in range(len(lengths)))
    ),
)
def test_the_rate_never_rises_and_each_extension_starts_where_the_last_batch_was(
    name: str, ends: tuple[int, ...]
) -> None:
    multiplier = shape(name)
    values = [scheduled_multiplier(multiplier, step, ends) for step in range(ends[-1])]

    assert values[: ends[0]] == [multiplier(step, ends[0]) for step in range(ends[0])]  # one segment: the cookbook's
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(values))
    for end in ends[:-1]:
        assert values[end] == pytest.approx(values[end - 1])
    assert all(value > 0 for value in values), "no batch trains at a zero rate"


def test_a_schedule_needs_a_segment() -> None:
    with pytest.raises(ValueError, match="segment"):
        scheduled_multiplier(shape("linear"), 0, ())
