"""Group metrics, trainability policies and constant-reward filtering (pure domain)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from domain.groups import (
    TIMED_OUT,
    FailedRolloutPolicy,
    RolloutResult,
    group_metrics,
    is_trainable,
    nonconstant_group_indices,
    status_fractions,
)
from domain.trajectory import EMPTY_TRAJECTORY, RewardPolicy, reconstruct_trajectory
from domain.triplets import RawTriplet

statuses = st.sampled_from(["succeeded", "failed", "cancelled", TIMED_OUT, "running", "queuing"])
FRACTION_KEYS = [f"by_group/frac_status_{s}" for s in ("succeeded", "failed", "cancelled", "others")]


def result(status: str, reward: float | None = 1.0) -> RolloutResult:
    raw = RawTriplet(
        prompt={"token_ids": [1, 2]}, response={"token_ids": [3], "logprobs": [{"logprob": -0.2}]}, reward=reward
    )
    return RolloutResult(rollout_id=f"ro-{status}", status=status, trajectory=reconstruct_trajectory([raw]))


class TestStatusFractions:
    @given(st.lists(statuses, min_size=1, max_size=20))
    def test_fractions_sum_to_one(self, statuses_G: list[str]) -> None:
        metrics = status_fractions(statuses_G)
        assert math.isclose(sum(metrics[k] for k in FRACTION_KEYS), 1.0)

    def test_empty_group_reports_zeros_instead_of_dividing_by_zero(self) -> None:
        assert all(v == 0.0 for v in status_fractions([]).values())

    def test_seed_metric_names_and_values(self) -> None:
        results_G = [result("succeeded"), result("failed"), result(TIMED_OUT), result("succeeded")]
        results_G[2] = RolloutResult(rollout_id="x", status=TIMED_OUT, trajectory=EMPTY_TRAJECTORY)
        metrics = group_metrics(results_G, FailedRolloutPolicy.EXCLUDE, RewardPolicy())
        assert metrics["by_group/frac_status_succeeded"] == 0.5
        assert metrics["by_group/frac_status_failed"] == 0.25
        assert metrics["by_group/frac_status_others"] == 0.25
        assert metrics["by_group/frac_empty_traj"] == 0.25
        assert metrics["by_group/frac_timed_out"] == 0.25
        assert metrics["by_group/n_excluded"] == 2.0
        assert metrics["reconstruct/kept"] == 3.0


class TestTrainability:
    def test_failed_rollouts_are_excluded_by_default(self) -> None:
        assert not is_trainable(result("failed"), FailedRolloutPolicy.EXCLUDE, RewardPolicy())
        assert is_trainable(result("failed"), FailedRolloutPolicy.TRAIN, RewardPolicy())

    def test_empty_trajectories_never_train(self) -> None:
        empty = RolloutResult(rollout_id="e", status="succeeded", trajectory=EMPTY_TRAJECTORY)
        assert not is_trainable(empty, FailedRolloutPolicy.TRAIN, RewardPolicy())

    def test_missing_final_reward_excludes_only_when_asked(self) -> None:
        unrewarded = result("succeeded", reward=None)
        assert is_trainable(unrewarded, FailedRolloutPolicy.EXCLUDE, RewardPolicy())
        assert not is_trainable(
            unrewarded, FailedRolloutPolicy.EXCLUDE, RewardPolicy(exclude_without_final_reward=True)
        )


class TestConstantRewardFilter:
    def test_all_constant_batch_returns_no_group(self) -> None:
        assert nonconstant_group_indices([[1.0, 1.0], [0.0, 0.0]]) == ()

    @given(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=0, max_size=4), max_size=6))
    def test_keeps_exactly_the_groups_with_spread(self, rewards_PG: list[list[float]]) -> None:
        keep = nonconstant_group_indices(rewards_PG)
        assert list(keep) == sorted(keep)
        assert {i for i, g in enumerate(rewards_PG) if len(set(g)) > 1} == set(keep)
