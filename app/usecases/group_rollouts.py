"""Roll out a batch of GRPO groups and build the trainer's groups from what came back.

Every member of every group goes through one ``run_rollouts`` loop under one concurrency cap.
Members that may not train (failed or timed out under ``failed_rollouts``, empty, or without a
final reward when the reward policy says so) are left out of their group and counted in its
metrics; a group left with no member is dropped; constant-reward groups are removed on request.
The batch comes back with its ``BatchAccount``: what every rollout and group came to, dropped ones
included, so an empty batch can say why. Runs on the ports only: the store, the triplet source and
the group assembler are passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic

from app.usecases.rollouts import OnResult, RolloutOptions, RolloutStats, run_rollouts
from domain.accounting import BatchAccount
from domain.groups import (
    FailedRolloutPolicy,
    RolloutResult,
    ScoredGroup,
    group_metrics,
    is_trainable,
    nonconstant_group_indices,
)
from domain.sampling import derive_seed
from ports.rollout_store import RolloutRequest, RolloutStore, SpanT, TripletSource
from ports.trajectory_groups import GroupAssembler, GroupT, MemberT, TaskGroupT

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupRolloutOptions:
    """How a batch of groups is rolled out and which members train."""

    rollouts: RolloutOptions = field(default_factory=RolloutOptions)
    failed_rollouts: FailedRolloutPolicy = FailedRolloutPolicy.EXCLUDE
    remove_constant_reward_groups: bool = False


@dataclass(frozen=True, slots=True)
class GroupedBatch(Generic[GroupT]):
    """The groups that train, and the account of the whole batch they came from."""

    groups: list[GroupT]
    """In input order, without the dropped ones."""
    account: BatchAccount
    oldest_versions: list[int | None] = field(default_factory=list)
    """Per group in ``groups``: the oldest policy version that sampled its trajectories (None: not recorded)."""
    scored: list[ScoredGroup] = field(default_factory=list)
    """Every task group of the batch in input order, dropped ones included: its rollouts and their advantages."""


async def rollout_groups(
    task_groups_P: Sequence[TaskGroupT],
    resources_id: str,
    i_batch: int,
    *,
    store: RolloutStore[SpanT],
    triplets: TripletSource[SpanT],
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT],
    mode: str,
    options: GroupRolloutOptions = GroupRolloutOptions(),
    on_result: OnResult | None = None,
    stats: RolloutStats | None = None,
    first_group: int = 0,
) -> GroupedBatch[GroupT]:
    """The batch's groups in input order, without the dropped ones, and its account.

    ``first_group``: the first group's index in its dataset batch (the groups of a batch may be rolled out apart),
    part of each rollout's sampling seed with ``i_batch``, ``mode`` and its index in the group.
    """
    members_P = [list(await assembler.members(task_group)) for task_group in task_groups_P]
    run_seed = options.rollouts.sampling_seed
    requests = [
        RolloutRequest(
            task=assembler.task_of(member),
            mode=mode,
            resources_id=resources_id,
            seed=None if run_seed is None else derive_seed(run_seed, mode, i_batch, first_group + i_group, i_member),
        )
        for i_group, members_G in enumerate(members_P)
        for i_member, member in enumerate(members_G)
    ]
    results = await run_rollouts(
        requests, store=store, triplets=triplets, options=options.rollouts, on_result=on_result, stats=stats
    )
    reward_policy = options.rollouts.reward_policy
    results_PG: list[Sequence[RolloutResult]] = []
    trainable_PG: list[list[bool]] = []
    assembled: list[tuple[int, GroupT]] = []
    oldest: dict[int, int | None] = {}
    offset = 0
    for i_group, (task_group, members_G) in enumerate(zip(task_groups_P, members_P, strict=True)):
        results_G = results[offset : offset + len(members_G)]
        offset += len(members_G)
        trainable_G = [is_trainable(r, options.failed_rollouts, reward_policy) for r in results_G]
        results_PG.append(results_G)
        trainable_PG.append(trainable_G)
        group = await _assemble(assembler, task_group, members_G, results_G, trainable_G, options)
        if group is None:
            logger.warning("[Batch %d %s] [Group %d] no trainable rollout; group dropped", i_batch, mode, i_group)
            continue
        assembled.append((i_group, group))
        oldest[i_group] = _oldest_version(r for r, ok in zip(results_G, trainable_G, strict=True) if ok)
    if options.remove_constant_reward_groups:
        keep = nonconstant_group_indices([assembler.total_rewards(g) for _, g in assembled])
        logger.info("[Batch %d %s] removed %d constant-reward group(s)", i_batch, mode, len(assembled) - len(keep))
        assembled = [assembled[i] for i in keep]
    kept = {i_group for i_group, _ in assembled}
    account = BatchAccount.of(results_PG, trainable_PG, [i in kept for i in range(len(task_groups_P))])
    trained = {i_group: assembler.advantages(group) for i_group, group in assembled}
    scored = [
        _scored(results_G, trainable_G, trained.get(i_group))
        for i_group, (results_G, trainable_G) in enumerate(zip(results_PG, trainable_PG, strict=True))
    ]
    return GroupedBatch(
        groups=[g for _, g in assembled],
        account=account,
        oldest_versions=[oldest[i] for i, _ in assembled],
        scored=scored,
    )


def _scored(
    results_G: Sequence[RolloutResult], trainable_G: Sequence[bool], advantages_G: Sequence[float] | None
) -> ScoredGroup:
    """The group's rollouts; its trained members (in order) with the advantages training gives them."""
    if advantages_G is None or len(advantages_G) != sum(trainable_G):
        return ScoredGroup.untrained(results_G)
    advantages = iter(advantages_G)
    return ScoredGroup(tuple(results_G), tuple(next(advantages) if ok else None for ok in trainable_G))


def _oldest_version(results: Iterable[RolloutResult]) -> int | None:
    versions = [v for r in results if (v := r.trajectory.oldest_policy_version) is not None]
    return min(versions) if versions else None


async def _assemble(
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT],
    task_group: TaskGroupT,
    members_G: Sequence[MemberT],
    results_G: Sequence[RolloutResult],
    trainable_G: Sequence[bool],
    options: GroupRolloutOptions,
) -> GroupT | None:
    reward_policy = options.rollouts.reward_policy
    kept = [
        (member, result)
        for member, result, trainable in zip(members_G, results_G, trainable_G, strict=True)
        if trainable
    ]
    if not kept:
        return None
    return await assembler.assemble(
        task_group,
        [member for member, _ in kept],
        [result.trajectory for _, result in kept],
        group_metrics(results_G, options.failed_rollouts, reward_policy),
    )
