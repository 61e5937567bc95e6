"""Reconstructed trajectories go through tinker-cookbook's own data processing without error."""

from __future__ import annotations

import math

import pytest
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.types import TrajectoryGroup

from adapters.cookbook.groups import CookbookGroups
from adapters.cookbook.rl_types import to_cookbook_trajectory, to_trajectory_group
from adapters.cookbook.training import CookbookTrainingData
from app.faces.compat import evaluation_metrics
from domain.trajectory import ReconstructedTrajectory, reconstruct_trajectory
from domain.triplets import RawTriplet
from ports.training_data import KLPenalty


def turn(
    prompt: list[int], response: list[int], reward: float | None = None, logprobs: int | None = None
) -> RawTriplet:
    n = len(response) if logprobs is None else logprobs
    return RawTriplet(
        prompt={"token_ids": prompt},
        response={"token_ids": response, "logprobs": [{"logprob": -0.1 * (i + 1)} for i in range(n)]},
        reward=reward,
    )


def group(*trajectories: ReconstructedTrajectory) -> TrajectoryGroup:
    return to_trajectory_group(list(trajectories), [0.0] * len(trajectories), [{} for _ in trajectories], {"g": 1.0})


EDGE_CASES = {
    "multi_turn_prefix_merge": [turn([1, 2], [3, 4]), turn([1, 2, 3, 4, 5], [6], reward=1.0)],
    "last_triplet_skipped": [turn([1, 2], [3], reward=0.5), RawTriplet({"token_ids": [9]}, {"token_ids": []}, 1.0)],
    "wrong_logprob_count_in_middle": [
        turn([1], [2]),
        turn([1, 2, 7], [8, 9], logprobs=1),
        turn([1, 2, 7, 8, 9], [4], 1),
    ],
    "no_logprobs_at_all": [RawTriplet({"token_ids": [1]}, {"token_ids": [2]}, 1.0)],
    "non_prefix_turns": [turn([1, 2], [3]), turn([5, 6], [7], reward=0.0)],
}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_cases_become_valid_training_data(name: str) -> None:
    good = reconstruct_trajectory([turn([1], [2], reward=0.0)])
    edge = reconstruct_trajectory(EDGE_CASES[name])
    groups_P = [group(good, edge)]
    advantages_P = compute_advantages(groups_P)
    data_D, metadata_D = assemble_training_data(groups_P, advantages_P)
    assert len(data_D) == len(metadata_D) >= 1
    for datum in data_D:
        logprobs = datum.loss_fn_inputs["logprobs"].to_torch()
        mask = datum.loss_fn_inputs["mask"].to_torch()
        assert logprobs.shape == mask.shape
        assert bool(((logprobs != 0) <= (mask > 0)).all()), "only action tokens carry sampling logprobs"
    metrics = compute_trajectory_metrics(groups_P, [[]])
    assert metrics["env/all/total_episodes"] == 2
    assert math.isfinite(metrics["env/all/reward/total"])


def test_prefix_turns_merge_into_one_datum_with_both_actions_trained() -> None:
    trajectory = reconstruct_trajectory(EDGE_CASES["multi_turn_prefix_merge"])
    groups_P = [group(trajectory, reconstruct_trajectory([turn([1, 2], [3], reward=0.0)]))]
    data_D, metadata_D = assemble_training_data(groups_P, compute_advantages(groups_P))
    merged = [d for d, m in zip(data_D, metadata_D, strict=True) if m["traj_idx"] == 0]
    assert len(merged) == 1
    assert merged[0].loss_fn_inputs["mask"].to_torch().sum().item() == 3.0  # tokens 3, 4 and 6


def test_metrics_stay_aligned_with_trajectories() -> None:
    tg = group(reconstruct_trajectory([turn([1], [2], 1.0)]), reconstruct_trajectory([turn([1], [3], 0.0)]))
    assert len(tg.metrics_G) == len(tg.trajectories_G)
    assert tg.get_total_rewards() == [1.0, 0.0]


def test_all_empty_batch_reports_zeros_instead_of_raising() -> None:
    empty = reconstruct_trajectory([RawTriplet({}, {}, None)])
    groups_P = [group(empty, empty)]
    metrics = evaluation_metrics(groups_P, n_tasks=1)
    assert metrics["env/all/frac_tasks_usable"] == 0.0
    assert metrics["env/all/total_turns"] == 0
    assert evaluation_metrics([], n_tasks=0)["env/all/total_episodes"] == 0
    assert to_cookbook_trajectory(empty).transitions == []


def test_a_test_task_that_left_no_group_counts_zero_in_the_test_reward() -> None:
    """Three test tasks, one timed out before any answer (no group): the score is over three, not two."""
    groups_P = [group(reconstruct_trajectory([turn([1], [2], r)])) for r in (1.0, 0.5)]
    metrics = evaluation_metrics(groups_P, n_tasks=3)
    assert metrics["env/all/reward/total"] == 0.5
    assert metrics["env/all/reward/total_of_finished"] == 0.75
    assert metrics["env/all/frac_tasks_usable"] == 2 / 3
    everything = evaluation_metrics(groups_P, n_tasks=2)
    assert everything["env/all/reward/total"] == everything["env/all/reward/total_of_finished"] == 0.75


async def test_the_advantages_transcripts_show_are_the_ones_the_datums_train_with() -> None:
    rewards = [1.0, 0.0, 0.0, 0.5]
    tg = group(*(reconstruct_trajectory([turn([1], [2 + i, 9], r)]) for i, r in enumerate(rewards)))
    shown = CookbookGroups().advantages(tg)
    data_D, _ = await CookbookTrainingData().rl_data([tg], KLPenalty(), None)
    assert len(data_D) == len(shown)
    for datum, advantage in zip(data_D, shown, strict=True):  # both action tokens of each trajectory
        assert [a for a, m in zip(datum.advantages, datum.mask, strict=True) if m > 0] == pytest.approx([advantage] * 2)
    assert shown == pytest.approx([0.625, -0.375, -0.375, 0.125])


def test_a_steps_metrics_average_each_key_over_the_dictionaries_that_hold_it() -> None:
    means = CookbookTrainingData().mean_metrics([{"loss": 1.0, "kl": 0.5}, {"loss": 3.0}])
    assert means == {"loss": 2.0, "kl": 0.5}
