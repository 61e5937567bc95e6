"""``sample_train_kl``: tinker-cookbook's sampler-trainer KL (``compute_kl_sample_train``) on the port's datums,
and how much of a batch the importance ratio would clip."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.cookbook.training import METRIC_RATIO_CLIP_FRAC, sample_train_kl
from domain.metric_names import KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2, SAMPLING_ENTROPY
from ports.policy import TrainingDatum


def datum(logprobs: list[float], mask: list[float]) -> TrainingDatum:
    n = len(logprobs)
    return TrainingDatum(
        model_input=tuple(range(1, n + 1)),
        target_tokens=tuple(range(2, n + 2)),
        logprobs=tuple(logprobs),
        advantages=tuple(0.5 * m for m in mask),
        mask=tuple(mask),
    )


DATA_D = [datum([0.0, -0.5, -1.0], [0.0, 1.0, 1.0]), datum([0.0, -2.0], [0.0, 1.0])]


def test_on_policy_logprobs_clip_nothing() -> None:
    metrics = sample_train_kl(DATA_D, [list(d.logprobs) for d in DATA_D])
    assert metrics[METRIC_RATIO_CLIP_FRAC] == 0.0
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(0.0)


def test_logprobs_shifted_beyond_epsilon_are_counted_on_action_tokens_only() -> None:
    shift = math.log(1.5)  # ratio 1.5 > 1 + 0.2
    training_D = [
        [-9.0, -0.5 + shift, -1.0],  # the first token is not an action: its shift must not count
        [-9.0, -2.0 + shift],
    ]
    metrics = sample_train_kl(DATA_D, training_D)
    assert metrics[METRIC_RATIO_CLIP_FRAC] == pytest.approx(2 / 3)


def test_no_action_tokens_reports_nothing() -> None:
    assert sample_train_kl([datum([0.0], [0.0])], [[0.0]]) == {}


logprob = st.floats(min_value=-20.0, max_value=0.0, allow_nan=False)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[TrainingDatum], list[list[float]]]:
    """Datums with sampling logprobs and a mask (at least one action token), and training logprobs for them."""
    data_D, training_D = [], []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        n = draw(st.integers(min_value=1, max_value=8))
        mask = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
        data_D.append(datum(draw(st.lists(logprob, min_size=n, max_size=n)), mask))
        training_D.append(draw(st.lists(logprob, min_size=n, max_size=n)))
    if not any(m for d in data_D for m in d.mask):
        data_D[0] = datum(list(data_D[0].logprobs), [1.0] * len(data_D[0].mask))
    return data_D, training_D


def by_hand(data_D: list[TrainingDatum], training_D: list[list[float]]) -> tuple[float, float, float]:
    """v1, v2 and entropy as the cookbook's docstring defines them, over action tokens only."""
    pairs = [
        (s, t)
        for d, lp in zip(data_D, training_D, strict=True)
        for s, t, m in zip(d.logprobs, lp, d.mask, strict=True)
        if m
    ]
    diffs = [s - t for s, t in pairs]
    return (
        sum(diffs) / len(diffs),
        0.5 * sum(x * x for x in diffs) / len(diffs),
        -sum(s for s, _ in pairs) / len(pairs),
    )


class TestSampleTrainKL:
    @given(batches())
    def test_is_zero_when_the_trainer_agrees_with_the_sampler(
        self, batch: tuple[list[TrainingDatum], list[list[float]]]
    ) -> None:
        data_D, _ = batch
        metrics = sample_train_kl(data_D, [list(d.logprobs) for d in data_D])
        assert metrics[KL_SAMPLE_TRAIN_V1] == 0.0
        assert metrics[KL_SAMPLE_TRAIN_V2] == 0.0
        assert metrics[METRIC_RATIO_CLIP_FRAC] == 0.0

    @given(batches())
    def test_matches_the_hand_computation_and_v2_bounds_v1(
        self, batch: tuple[list[TrainingDatum], list[list[float]]]
    ) -> None:
        data_D, training_D = batch
        metrics = sample_train_kl(data_D, training_D)
        v1, v2, entropy = by_hand(data_D, training_D)
        # The cookbook works in float32 tensors: compare at float32 precision.
        assert metrics[KL_SAMPLE_TRAIN_V1] == pytest.approx(v1, rel=1e-4, abs=1e-4)
        assert metrics[KL_SAMPLE_TRAIN_V2] == pytest.approx(v2, rel=1e-4, abs=1e-4)
        assert metrics[SAMPLING_ENTROPY] == pytest.approx(entropy, rel=1e-4, abs=1e-4)
        assert metrics[KL_SAMPLE_TRAIN_V2] >= 0.0
        # mean(d)^2 <= mean(d^2): |v1| <= sqrt(2 v2)
        assert abs(metrics[KL_SAMPLE_TRAIN_V1]) <= math.sqrt(2 * metrics[KL_SAMPLE_TRAIN_V2]) * (1 + 1e-4) + 1e-6

    def test_example(self) -> None:
        training_D = [[-9.0, -0.7, -1.1], [-9.0, -1.5]]  # action-token differences 0.2, 0.1, -0.5
        metrics = sample_train_kl(DATA_D, training_D)
        assert metrics[KL_SAMPLE_TRAIN_V1] == pytest.approx(-0.2 / 3, abs=1e-6)
        assert metrics[KL_SAMPLE_TRAIN_V2] == pytest.approx(0.5 * (0.04 + 0.01 + 0.25) / 3, abs=1e-6)
        assert metrics[SAMPLING_ENTROPY] == pytest.approx((0.5 + 1.0 + 2.0) / 3, abs=1e-6)
