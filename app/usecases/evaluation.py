"""Evaluate the policy on a test set: roll out every test task with the agents that train.

A failed rollout's traced turns count (as reward 0 when it emitted none) instead of vanishing and
flattering the score; the result is the assembler's evaluation metrics, optionally prefixed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.usecases.group_rollouts import GroupRolloutOptions, rollout_groups
from app.usecases.rollouts import DEFAULT_ROLLOUT_OPTIONS, OnResult, RolloutOptions
from domain.groups import FailedRolloutPolicy, ScoredGroup
from ports.policy_endpoint import PolicyServer
from ports.rollout_store import RolloutStore, SpanT, TripletSource
from ports.trajectory_groups import GroupAssembler, GroupT, MemberT, TaskBatches, TaskGroupT


def all_task_groups(batches: TaskBatches[TaskGroupT]) -> list[TaskGroupT]:
    """Every task group of every batch, flattened (what an evaluation rolls out)."""
    return [group for index in range(len(batches)) for group in batches.get_batch(index)]


async def evaluate_task_groups(
    task_groups_P: Sequence[TaskGroupT],
    resources_id: str,
    i_batch: int,
    *,
    store: RolloutStore[SpanT],
    triplets: TripletSource[SpanT],
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT],
    mode: str = "val",
    rollouts: RolloutOptions = DEFAULT_ROLLOUT_OPTIONS,
    name: str | None = None,
    on_result: OnResult | None = None,
    on_groups: Callable[[Sequence[ScoredGroup]], None] | None = None,
) -> dict[str, float]:
    """Metrics of one pass over ``task_groups_P``, keys prefixed with ``name/`` when it is given.

    ``on_groups`` receives every task group's rollouts (none of them trained, so no advantages).
    """
    batch = await rollout_groups(
        task_groups_P,
        resources_id,
        i_batch,
        store=store,
        triplets=triplets,
        assembler=assembler,
        mode=mode,
        options=GroupRolloutOptions(rollouts=rollouts, failed_rollouts=FailedRolloutPolicy.TRAIN),
        on_result=on_result,
    )
    if on_groups is not None:
        on_groups([ScoredGroup.untrained(group.results) for group in batch.scored])
    metrics = assembler.evaluation_metrics(batch.groups, n_tasks=len(task_groups_P))
    if name is not None:
        metrics = {f"{name}/{k}": v for k, v in metrics.items()}
    return metrics


async def evaluate_policy(
    server: PolicyServer,
    temperature: float,
    task_groups_P: Sequence[TaskGroupT],
    resources_id: str,
    i_batch: int,
    *,
    store: RolloutStore[SpanT],
    triplets: TripletSource[SpanT],
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT],
    rollouts: RolloutOptions = DEFAULT_ROLLOUT_OPTIONS,
    name: str | None = "test",
    on_groups: Callable[[Sequence[ScoredGroup]], None] | None = None,
) -> dict[str, float]:
    """Evaluate with the endpoint sampling at ``temperature`` by default, then restore its defaults."""
    if not task_groups_P:
        return {}
    previous = server.set_temperature(temperature)
    try:
        return await evaluate_task_groups(
            task_groups_P,
            resources_id,
            i_batch,
            store=store,
            triplets=triplets,
            assembler=assembler,
            rollouts=rollouts,
            name=name,
            on_groups=on_groups,
        )
    finally:
        server.set_sampling_defaults(previous)
