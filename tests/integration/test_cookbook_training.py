"""``sample_train_kl`` reports how much of a batch the importance ratio would clip."""

from __future__ import annotations

import math

import pytest

from adapters.cookbook_training import METRIC_RATIO_CLIP_FRAC, sample_train_kl
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
