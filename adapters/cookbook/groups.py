"""The group port on tinker-cookbook's types: task groups are ``AGLDummyEnvGroupBuilder``s, groups
are ``TrajectoryGroup``s, batch metrics are the cookbook's ``compute_trajectory_metrics`` and advantages
its ``compute_advantages``, the function training calls on the same groups.

Group-level rewards come from the builder's own ``compute_group_rewards``, so a user's builder
that scores a group as a whole keeps doing so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tinker_cookbook.rl.data_processing import compute_advantages
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.types import TrajectoryGroup

from adapters.cookbook.env import AGLDummyEnv, AGLDummyEnvGroupBuilder
from adapters.cookbook.rl_types import to_cookbook_trajectory, to_trajectory_group
from domain.metric_names import TRAIN_REWARD as REWARD
from domain.trajectory import ReconstructedTrajectory


class CookbookGroups:
    """``ports.trajectory_groups.GroupAssembler`` for Agent-lightning tasks as cookbook environments."""

    async def members(self, task_group: AGLDummyEnvGroupBuilder[Any]) -> Sequence[AGLDummyEnv[Any]]:
        return list(await task_group.make_envs())

    def task_of(self, member: AGLDummyEnv[Any]) -> object:
        return member.task

    async def assemble(
        self,
        task_group: AGLDummyEnvGroupBuilder[Any],
        members_G: Sequence[AGLDummyEnv[Any]],
        trajectories_G: Sequence[ReconstructedTrajectory],
        group_metrics: Mapping[str, float],
    ) -> TrajectoryGroup:
        cookbook_G = [to_cookbook_trajectory(t) for t in trajectories_G]
        rewards_and_metrics_G = await task_group.compute_group_rewards(cookbook_G, list(members_G))
        return to_trajectory_group(
            trajectories_G,
            [reward for reward, _ in rewards_and_metrics_G],
            [metrics for _, metrics in rewards_and_metrics_G],
            group_metrics,
        )

    def total_rewards(self, group: TrajectoryGroup) -> Sequence[float]:
        return [float(r) for r in group.get_total_rewards()]

    def advantages(self, group: TrajectoryGroup) -> Sequence[float]:
        return [float(a) for a in compute_advantages([group])[0]]

    def batch_metrics(
        self, groups_P: Sequence[TrajectoryGroup], task_groups_P: Sequence[AGLDummyEnvGroupBuilder[Any]]
    ) -> dict[str, float]:
        tags_P = [b.logging_tags() for b in task_groups_P]
        return dict(compute_trajectory_metrics(list(groups_P), tags_P))

    def evaluation_metrics(self, groups_P: Sequence[TrajectoryGroup], *, n_tasks: int) -> dict[str, float]:
        return evaluation_metrics(groups_P, n_tasks=n_tasks)


def evaluation_metrics(groups_P: Sequence[TrajectoryGroup], *, n_tasks: int) -> dict[str, float]:
    """Cookbook trajectory metrics plus the fraction of tasks that produced a usable trajectory.

    ``env/all/reward/total`` is the mean over all ``n_tasks`` test tasks, one whose rollouts left no group
    (timed out before any call was answered, say) counting 0: a score over the tasks that finished would
    flatter a policy whose slow replies run out of time. The cookbook's mean over the finished ones is
    ``env/all/reward/total_of_finished``; both are equal when every task finished.
    """
    metrics = dict(compute_trajectory_metrics(list(groups_P), [[] for _ in groups_P]))
    usable = sum(1 for g in groups_P if any(t.transitions for t in g.trajectories_G))
    metrics["env/all/frac_tasks_usable"] = usable / n_tasks if n_tasks else 0.0
    if n_tasks:
        metrics[f"{REWARD}_of_finished"] = metrics.get(REWARD, 0.0)
        per_task = [statistics.fmean(g.get_total_rewards()) for g in groups_P if g.trajectories_G]
        metrics[REWARD] = sum(per_task) / max(n_tasks, len(per_task))
    return metrics
