"""Conversion of the domain's reconstructed trajectories into tinker-cookbook's RL types.

The cookbook's ``compute_advantages``, ``assemble_training_data`` and ``compute_trajectory_metrics``
then run on them unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.types import Metrics, Trajectory, TrajectoryGroup, Transition

from domain.trajectory import ReconstructedTrajectory, TokenTransition


def to_cookbook_transition(transition: TokenTransition) -> Transition:
    return Transition(
        ob=tinker.ModelInput.from_ints(list(transition.ob)),
        ac=TokensWithLogprobs(tokens=list(transition.ac), maybe_logprobs=list(transition.logprobs)),
        reward=transition.reward,
        episode_done=transition.episode_done,
        metrics=dict(transition.metrics),
    )


def to_cookbook_trajectory(trajectory: ReconstructedTrajectory) -> Trajectory:
    """A cookbook ``Trajectory``; its final observation is empty, as in the original example."""
    return Trajectory(
        transitions=[to_cookbook_transition(t) for t in trajectory.transitions],
        final_ob=tinker.ModelInput.empty(),
    )


def to_trajectory_group(
    trajectories_G: Sequence[ReconstructedTrajectory],
    final_rewards_G: Sequence[float],
    metrics_G: Sequence[Mapping[str, float | int]],
    group_metrics: Mapping[str, float],
) -> TrajectoryGroup:
    """A cookbook group; the group-level metrics are merged into every member's metrics.

    Merging (rather than appending one extra dict, as the original did) keeps ``metrics_G`` aligned
    with ``trajectories_G`` and gives the same means in ``compute_trajectory_metrics``.
    """
    merged_G: list[Metrics] = [{**dict(m), **group_metrics} for m in metrics_G]
    return TrajectoryGroup(
        trajectories_G=[to_cookbook_trajectory(t) for t in trajectories_G],
        final_rewards_G=list(final_rewards_G),
        metrics_G=merged_G,
    )
