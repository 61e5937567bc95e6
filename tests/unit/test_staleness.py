"""Properties and examples of measuring how far off-policy asynchronous data is (pure domain)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.staleness import (
    METRIC_STALENESS_MAX,
    METRIC_STALENESS_MEAN,
    StalenessPolicy,
    is_stale,
    ratio_clip_fraction,
    staleness_metrics,
    staleness_scaled_lr,
    steps_behind,
)

versions = st.integers(min_value=0, max_value=10_000)
maybe_version = st.one_of(st.none(), versions)
logprob = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False)


@st.composite
def aligned_tokens(draw: st.DrawFn) -> tuple[list[float], list[float], list[float]]:
    n = draw(st.integers(min_value=0, max_value=40))
    sample = draw(st.lists(logprob, min_size=n, max_size=n))
    train = draw(st.lists(logprob, min_size=n, max_size=n))
    mask = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    return sample, train, mask


class TestStepsBehind:
    @given(versions, maybe_version)
    def test_is_never_negative(self, current: int, sampled: int | None) -> None:
        assert steps_behind(current, sampled) >= 0

    @given(versions, versions)
    def test_is_the_version_distance_when_sampled_is_not_ahead(self, a: int, b: int) -> None:
        current, sampled = max(a, b), min(a, b)
        assert steps_behind(current, sampled) == current - sampled

    @given(versions)
    def test_unknown_version_counts_as_on_policy(self, current: int) -> None:
        assert steps_behind(current, None) == 0
        assert not is_stale(current, None, max_steps_off_policy=0)


class TestIsStale:
    @given(versions, maybe_version, st.integers(min_value=0, max_value=100))
    def test_agrees_with_steps_behind(self, current: int, sampled: int | None, max_off: int) -> None:
        assert is_stale(current, sampled, max_off) == (steps_behind(current, sampled) > max_off)

    def test_exactly_max_steps_behind_is_still_fresh(self) -> None:
        assert not is_stale(5, 3, max_steps_off_policy=2)
        assert is_stale(5, 2, max_steps_off_policy=2)

    def test_policies_are_named_as_configured(self) -> None:
        assert StalenessPolicy("discard") is StalenessPolicy.DISCARD
        assert StalenessPolicy("admit") is StalenessPolicy.ADMIT


class TestStalenessMetrics:
    def test_empty_input_reports_nothing(self) -> None:
        assert staleness_metrics([]) == {}

    @given(st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=50))
    def test_mean_is_between_min_and_max(self, steps: list[int]) -> None:
        metrics = staleness_metrics(steps)
        assert set(metrics) == {METRIC_STALENESS_MEAN, METRIC_STALENESS_MAX}
        assert min(steps) - 1e-9 <= metrics[METRIC_STALENESS_MEAN] <= metrics[METRIC_STALENESS_MAX] + 1e-9
        assert metrics[METRIC_STALENESS_MAX] == max(steps)

    def test_example(self) -> None:
        assert staleness_metrics([0, 1, 2, 5]) == {METRIC_STALENESS_MEAN: 2.0, METRIC_STALENESS_MAX: 5.0}


class TestRatioClipFraction:
    @given(aligned_tokens(), st.floats(min_value=0.0, max_value=2.0))
    def test_is_a_fraction(self, tokens: tuple[list[float], list[float], list[float]], epsilon: float) -> None:
        assert 0.0 <= ratio_clip_fraction(*tokens, epsilon=epsilon) <= 1.0

    @given(aligned_tokens())
    def test_identical_logprobs_clip_nothing(self, tokens: tuple[list[float], list[float], list[float]]) -> None:
        sample, _train, mask = tokens
        assert ratio_clip_fraction(sample, sample, mask) == 0.0

    @given(aligned_tokens())
    def test_non_action_tokens_never_count(self, tokens: tuple[list[float], list[float], list[float]]) -> None:
        sample, train, mask = tokens
        assert ratio_clip_fraction(sample, train, [0.0] * len(mask)) == 0.0
        actions = [i for i, m in enumerate(mask) if m > 0]
        only_actions = ([sample[i] for i in actions], [train[i] for i in actions], [1.0] * len(actions))
        assert ratio_clip_fraction(sample, train, mask) == ratio_clip_fraction(*only_actions)

    @given(aligned_tokens(), st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=0.0, max_value=1.0))
    def test_a_wider_range_clips_no_more(
        self, tokens: tuple[list[float], list[float], list[float]], a: float, b: float
    ) -> None:
        narrow, wide = min(a, b), max(a, b)
        assert ratio_clip_fraction(*tokens, epsilon=wide) <= ratio_clip_fraction(*tokens, epsilon=narrow)

    def test_counts_ratios_outside_the_range_on_action_tokens(self) -> None:
        sample = [-1.0, -1.0, -1.0, -1.0, -1.0]
        train = [-1.0, -1.0 + math.log(1.5), -1.0 + math.log(0.5), -1.0 + math.log(1.1), -5.0]
        mask = [1.0, 1.0, 1.0, 1.0, 0.0]  # the last token's huge shift is not an action
        assert ratio_clip_fraction(sample, train, mask) == 0.5

    def test_huge_differences_do_not_overflow(self) -> None:
        assert ratio_clip_fraction([-1000.0], [0.0], [1.0]) == 1.0

    def test_nan_ratio_is_flagged_as_clipped(self) -> None:
        assert ratio_clip_fraction([-1.0], [math.nan], [1.0]) == 1.0

    def test_no_action_tokens_is_zero(self) -> None:
        assert ratio_clip_fraction([], [], []) == 0.0

    def test_misaligned_inputs_are_a_programming_error(self) -> None:
        with pytest.raises(ValueError, match="misaligned"):
            ratio_clip_fraction([-1.0], [-1.0, -2.0], [1.0])
        with pytest.raises(ValueError, match="epsilon"):
            ratio_clip_fraction([-1.0], [-1.0], [1.0], epsilon=-0.1)


@given(st.floats(min_value=1e-6, max_value=1.0), st.lists(st.integers(min_value=0, max_value=20), max_size=30))
def test_the_staleness_scaled_rate_is_the_full_rate_on_fresh_data_and_shrinks_with_staleness(
    learning_rate: float, behind: list[int]
) -> None:
    lr = staleness_scaled_lr(learning_rate, behind)
    assert 0 < lr <= learning_rate
    if not any(behind):
        assert lr == learning_rate
    else:
        assert lr == pytest.approx(learning_rate / (1 + sum(behind) / len(behind)))
        assert staleness_scaled_lr(learning_rate, [k + 1 for k in behind]) < lr


def test_a_batch_one_version_behind_takes_half_a_step_and_bad_input_is_refused() -> None:
    assert staleness_scaled_lr(1e-2, [1, 1, 1]) == pytest.approx(5e-3)
    assert staleness_scaled_lr(1e-2, [0, 2]) == pytest.approx(5e-3)
    with pytest.raises(ValueError, match="negative"):
        staleness_scaled_lr(1e-2, [-1])
    with pytest.raises(ValueError, match="learning_rate"):
        staleness_scaled_lr(0.0, [1])
