"""How far off-policy asynchronous training data is, and what to do about it.

In the asynchronous mode, rollouts sampled by policy version ``v`` may be trained on at a later
version ``current``; ``current - v`` is how many optimizer steps behind the data is. The
tinker-cookbook drops a group more than ``max_steps_off_policy`` behind and resamples its task
(``StalenessPolicy.DISCARD``); admission control instead keeps the sampler at most
``sampling_steps_ahead`` versions ahead, so nothing needs dropping (``StalenessPolicy.ADMIT``).
``ratio_clip_fraction`` tells how much of a batch the importance ratio would clip at that distance,
and ``staleness_scaled_lr`` shrinks the step a stale batch takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum

METRIC_STALENESS_MEAN = "async/staleness_mean"
METRIC_STALENESS_MAX = "async/staleness_max"


class StalenessPolicy(StrEnum):
    """What happens to a group sampled too many policy versions ago."""

    DISCARD = "discard"
    """Cookbook semantics: a group more than ``max_steps_off_policy`` behind is dropped and its task resampled."""
    ADMIT = "admit"
    """Admission control bounds staleness before sampling, so nothing is dropped afterwards."""


def steps_behind(current_version: int, sampled_version: int | None) -> int:
    """Optimizer steps between the sampling policy and the current one, never negative.

    An unknown version (``None``: a client-side span without the endpoint's tag) counts as 0, on
    policy: it cannot be measured, and dropping it would silently lose every untagged rollout. A
    version ahead of ``current`` (a sampler that already saw a newer checkpoint) also counts as 0.
    """
    if sampled_version is None:
        return 0
    return max(current_version - sampled_version, 0)


def is_stale(current_version: int, sampled_version: int | None, max_steps_off_policy: int) -> bool:
    """Whether data sampled at ``sampled_version`` is more than ``max_steps_off_policy`` steps behind."""
    return steps_behind(current_version, sampled_version) > max_steps_off_policy


def staleness_metrics(steps_behind_G: Sequence[int]) -> dict[str, float]:
    """Mean and max staleness of the trained groups; empty when nothing was trained (no fake zeros)."""
    if not steps_behind_G:
        return {}
    return {
        METRIC_STALENESS_MEAN: sum(steps_behind_G) / len(steps_behind_G),
        METRIC_STALENESS_MAX: float(max(steps_behind_G)),
    }


def staleness_scaled_lr(learning_rate: float, steps_behind_G: Sequence[int]) -> float:
    """``learning_rate / (1 + mean staleness)``: the staleness-aware rate of asynchronous SGD (Zhang et al., 2016).

    A gradient computed on data ``k`` versions old lands after ``k`` other steps already moved the
    policy the same way; at a rate tuned for fresh data the late steps overshoot and the policy
    oscillates. Fresh data (or no groups) keeps the full rate.
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    if any(k < 0 for k in steps_behind_G):
        raise ValueError(f"staleness cannot be negative: {sorted(steps_behind_G)[:3]}")
    if not steps_behind_G:
        return learning_rate
    return learning_rate / (1 + sum(steps_behind_G) / len(steps_behind_G))


def ratio_clip_fraction(
    sampling_logprobs_T: Sequence[float],
    training_logprobs_T: Sequence[float],
    mask_T: Sequence[float],
    epsilon: float = 0.2,
) -> float:
    """Fraction of action tokens (``mask > 0``) whose ratio ``exp(train - sample)`` is outside ``[1-eps, 1+eps]``.

    The comparison is made in log space, so large differences cannot overflow; a NaN difference
    counts as outside (a broken ratio is worth flagging). No action tokens gives 0.0.
    """
    if not len(sampling_logprobs_T) == len(training_logprobs_T) == len(mask_T):
        raise ValueError(
            f"misaligned tokens: {len(sampling_logprobs_T)} sampling logprobs, "
            f"{len(training_logprobs_T)} training logprobs, {len(mask_T)} mask entries"
        )
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    low = math.log(1 - epsilon) if epsilon < 1 else -math.inf
    high = math.log1p(epsilon)
    n_actions = n_outside = 0
    for sample, train, mask in zip(sampling_logprobs_T, training_logprobs_T, mask_T, strict=True):
        if not mask > 0:
            continue
        n_actions += 1
        if not low <= train - sample <= high:
            n_outside += 1
    return n_outside / n_actions if n_actions else 0.0
