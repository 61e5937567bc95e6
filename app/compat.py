"""Drop-in replacement for the original example's ``agl_tinker.rollout`` and ``agl_tinker.env``.

Users of the original switch by changing one import: the names and positional signatures are the
same, the new options are keyword-only. Underneath, everything runs through ``app.rollouts`` (one
batch loop, deadlines, no polling per rollout) and the pure domain reconstruction.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from agentlightning import LightningStore, Rollout, RolloutMode, Span, TraceToTripletBase
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup

from adapters.agl_store import AglRolloutStore, AglTripletSource
from adapters.cookbook_env import AGLDataset, AGLDatasetBuilder, AGLDummyEnv, AGLDummyEnvGroupBuilder
from adapters.cookbook_types import to_cookbook_trajectory, to_trajectory_group
from app.rollouts import DEFAULT_ROLLOUT_TIMEOUT_S, OnResult, RolloutOptions, RolloutStats, run_rollouts
from domain.groups import FailedRolloutPolicy, RolloutResult, group_metrics, is_trainable
from domain.groups import nonconstant_group_indices as _nonconstant
from domain.trajectory import RewardPolicy, reconstruct_trajectory
from ports.rollout_store import RetryPolicy, RolloutRequest

__all__ = [
    "AGLDataset",
    "AGLDatasetBuilder",
    "AGLDummyEnv",
    "AGLDummyEnvGroupBuilder",
    "AGLTestSetEvaluator",
    "agl_single_rollout",
    "dataset_to_env_group_builders",
    "do_group_of_group_rollouts",
    "reconstruct_transitions",
]

T_task = TypeVar("T_task")
logger = logging.getLogger(__name__)


def reconstruct_transitions(spans: Sequence[Span], adapter: TraceToTripletBase, rollout_id: str) -> Trajectory:
    """Rebuild a cookbook ``Trajectory`` from one rollout's spans (``adapter.adapt`` runs once)."""
    reconstructed = reconstruct_trajectory(AglTripletSource(adapter).adapt(spans))
    for rejection in reconstructed.rejections:
        logger.warning(
            "[Rollout %s] triplet %d dropped: %s (%s)",
            rollout_id,
            rejection.index,
            rejection.reason.value,
            rejection.detail,
        )
    return to_cookbook_trajectory(reconstructed)


async def agl_single_rollout(
    llm_resources_id: str,
    env: AGLDummyEnv[Any],
    *,
    store: LightningStore,
    adapter: TraceToTripletBase,
    mode: RolloutMode,
    rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
) -> tuple[Rollout, Trajectory]:
    """Run one rollout to completion (or its deadline) and rebuild its trajectory."""
    (result,) = await run_rollouts(
        [RolloutRequest(task=env.task, mode=mode, resources_id=llm_resources_id)],
        store=AglRolloutStore(store),
        triplets=AglTripletSource(adapter),
        options=RolloutOptions(rollout_timeout_s=rollout_timeout_s, concurrency=1),
    )
    rollout = await store.get_rollout_by_id(result.rollout_id)
    if rollout is None:
        raise LookupError(f"rollout {result.rollout_id} vanished from the store")
    return rollout, to_cookbook_trajectory(result.trajectory)


async def do_group_of_group_rollouts(
    env_group_builders_P: Sequence[AGLDummyEnvGroupBuilder[Any]],
    llm_resources_id: str,
    i_batch: int,
    *,
    store: LightningStore,
    adapter: TraceToTripletBase,
    mode: RolloutMode,
    do_remove_constant_reward_groups: bool = False,
    concurrency: int = 16,
    rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
    retry: RetryPolicy | None = None,
    failed_rollouts: FailedRolloutPolicy = FailedRolloutPolicy.EXCLUDE,
    reward_policy: RewardPolicy | None = None,
    on_result: OnResult | None = None,
    stats: RolloutStats | None = None,
) -> list[TrajectoryGroup]:
    """Roll out every group of the batch under one global concurrency cap; groups keep input order.

    Members that may not train (failed or timed out under ``failed_rollouts``, empty, or without a
    final reward when the reward policy says so) are left out of their group and counted in its
    metrics; a group left with no member is dropped. With ``do_remove_constant_reward_groups``
    the batch can come back empty.
    """
    reward_policy = reward_policy or RewardPolicy()
    envs_P = [list(await builder.make_envs()) for builder in env_group_builders_P]
    requests = [
        RolloutRequest(task=env.task, mode=mode, resources_id=llm_resources_id) for env in itertools.chain(*envs_P)
    ]
    results = await run_rollouts(
        requests,
        store=AglRolloutStore(store),
        triplets=AglTripletSource(adapter),
        options=RolloutOptions(
            rollout_timeout_s=rollout_timeout_s,
            concurrency=concurrency,
            retry=retry or RetryPolicy(),
            reward_policy=reward_policy,
        ),
        on_result=on_result,
        stats=stats,
    )
    groups: list[TrajectoryGroup] = []
    offset = 0
    for i_group, (builder, envs_G) in enumerate(zip(env_group_builders_P, envs_P, strict=True)):
        results_G = results[offset : offset + len(envs_G)]
        offset += len(envs_G)
        group = await _trajectory_group(builder, envs_G, results_G, failed_rollouts, reward_policy)
        if group is None:
            logger.warning("[Batch %d %s] [Group %d] no trainable rollout; group dropped", i_batch, mode, i_group)
            continue
        groups.append(group)
    if do_remove_constant_reward_groups:
        keep = _nonconstant([g.get_total_rewards() for g in groups])
        logger.info("[Batch %d %s] removed %d constant-reward group(s)", i_batch, mode, len(groups) - len(keep))
        groups = [groups[i] for i in keep]
    return groups


async def _trajectory_group(
    builder: AGLDummyEnvGroupBuilder[Any],
    envs_G: Sequence[AGLDummyEnv[Any]],
    results_G: Sequence[RolloutResult],
    failed_rollouts: FailedRolloutPolicy,
    reward_policy: RewardPolicy,
) -> TrajectoryGroup | None:
    kept = [
        (env, result)
        for env, result in zip(envs_G, results_G, strict=True)
        if is_trainable(result, failed_rollouts, reward_policy)
    ]
    if not kept:
        return None
    cookbook_G = [to_cookbook_trajectory(result.trajectory) for _, result in kept]
    rewards_and_metrics_G = await builder.compute_group_rewards(cookbook_G, [env for env, _ in kept])
    return to_trajectory_group(
        [result.trajectory for _, result in kept],
        [reward for reward, _ in rewards_and_metrics_G],
        [metrics for _, metrics in rewards_and_metrics_G],
        group_metrics(results_G, failed_rollouts, reward_policy),
    )


def dataset_to_env_group_builders(dataset: AGLDataset[T_task]) -> list[AGLDummyEnvGroupBuilder[T_task]]:
    """Every group builder of every batch, flattened (what the test-set evaluator rolls out)."""
    return list(itertools.chain(*[dataset.get_batch(i) for i in range(len(dataset))]))


class AGLTestSetEvaluator(Generic[T_task]):
    """Rolls out a test set with the same agents that train, and reports cookbook metrics."""

    def __init__(self, dataset: AGLDataset[T_task], name: str | None = None) -> None:
        self.env_group_builders_P = dataset_to_env_group_builders(dataset)
        self.name = name

    async def __call__(
        self,
        llm_resources_id: str,
        store: LightningStore,
        adapter: TraceToTripletBase,
        mode: RolloutMode,
        i_batch: int,
        *,
        concurrency: int = 16,
        rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
        on_result: OnResult | None = None,
    ) -> dict[str, float]:
        groups_P = await do_group_of_group_rollouts(
            self.env_group_builders_P,
            llm_resources_id,
            i_batch,
            store=store,
            adapter=adapter,
            mode=mode,
            concurrency=concurrency,
            rollout_timeout_s=rollout_timeout_s,
            # A failed rollout's traced turns count (as reward 0 when it emitted none) instead of
            # vanishing and flattering the score.
            failed_rollouts=FailedRolloutPolicy.TRAIN,
            on_result=on_result,
        )
        metrics = evaluation_metrics(groups_P, n_tasks=len(self.env_group_builders_P))
        if self.name is not None:
            metrics = {f"{self.name}/{k}": v for k, v in metrics.items()}
        return metrics


def evaluation_metrics(groups_P: list[TrajectoryGroup], *, n_tasks: int) -> dict[str, float]:
    """Cookbook trajectory metrics plus the fraction of tasks that produced a usable trajectory."""
    metrics = dict(compute_trajectory_metrics(groups_P, [[] for _ in groups_P]))
    usable = sum(1 for g in groups_P if any(t.transitions for t in g.trajectories_G))
    metrics["env/all/frac_tasks_usable"] = usable / n_tasks if n_tasks else 0.0
    return metrics
