"""Drop-in replacement for the original example's ``agl_tinker.rollout`` and ``agl_tinker.env``.

Users of the original switch by changing one import: the names and positional signatures are the
same, the new options are keyword-only. Each function is a thin face: it binds the Agent-lightning
store and adapter it is given to the ports and calls the same use cases the training loop runs
(``app.usecases.group_rollouts``, ``app.usecases.evaluation``, ``app.usecases.rollouts``). The training entry points of
``agl_tinker.train``/``llm``/``algo`` (``Config``, ``main``, ``create_llm_proxy``, ``TinkerLLM``,
``Tinker``) are re-exported from ``app.faces.agl_tinker_compat`` and ``app.faces.agl_algorithm``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from agentlightning import LightningStore, Rollout, RolloutMode, Span, TraceToTripletBase
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.cookbook.env import AGLDataset, AGLDatasetBuilder, AGLDummyEnv, AGLDummyEnvGroupBuilder
from adapters.cookbook.groups import CookbookGroups, evaluation_metrics
from adapters.cookbook.rl_types import to_cookbook_trajectory
from app.faces.agl_algorithm import Tinker
from app.faces.agl_tinker_compat import Config, TinkerLLM, create_llm_proxy, main
from app.usecases.evaluation import all_task_groups, evaluate_task_groups
from app.usecases.group_rollouts import GroupRolloutOptions, rollout_groups
from app.usecases.rollouts import DEFAULT_ROLLOUT_TIMEOUT_S, OnResult, RolloutOptions, RolloutStats, run_rollouts
from domain.groups import FailedRolloutPolicy
from domain.trajectory import RewardPolicy, reconstruct_trajectory
from ports.rollout_store import RetryPolicy, RolloutRequest

__all__ = [
    "AGLDataset",
    "AGLDatasetBuilder",
    "AGLDummyEnv",
    "AGLDummyEnvGroupBuilder",
    "AGLTestSetEvaluator",
    "Config",
    "Tinker",
    "TinkerLLM",
    "agl_single_rollout",
    "create_llm_proxy",
    "dataset_to_env_group_builders",
    "do_group_of_group_rollouts",
    "evaluation_metrics",
    "main",
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
    batch = await rollout_groups(
        env_group_builders_P,
        llm_resources_id,
        i_batch,
        store=AglRolloutStore(store),
        triplets=AglTripletSource(adapter),
        assembler=CookbookGroups(),
        mode=mode,
        options=GroupRolloutOptions(
            rollouts=RolloutOptions(
                rollout_timeout_s=rollout_timeout_s,
                concurrency=concurrency,
                retry=retry or RetryPolicy(),
                reward_policy=reward_policy or RewardPolicy(),
            ),
            failed_rollouts=failed_rollouts,
            remove_constant_reward_groups=do_remove_constant_reward_groups,
        ),
        on_result=on_result,
        stats=stats,
    )
    return batch.groups


def dataset_to_env_group_builders(dataset: AGLDataset[T_task]) -> list[AGLDummyEnvGroupBuilder[T_task]]:
    """Every group builder of every batch, flattened (what the test-set evaluator rolls out)."""
    return all_task_groups(dataset)


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
        return await evaluate_task_groups(
            self.env_group_builders_P,
            llm_resources_id,
            i_batch,
            store=AglRolloutStore(store),
            triplets=AglTripletSource(adapter),
            assembler=CookbookGroups(),
            mode=mode,
            rollouts=RolloutOptions(rollout_timeout_s=rollout_timeout_s, concurrency=concurrency),
            name=self.name,
            on_result=on_result,
        )
