"""Roll out a batch of GRPO groups and build the trainer's groups from what came back.

Every member of every group goes through one ``run_rollouts`` loop under one concurrency cap.
Members that may not train (failed or timed out under ``failed_rollouts``, empty, or without a
final reward when the reward policy says so) are left out of their group and counted in its
metrics; a group left with no member is dropped; constant-reward groups are removed on request.
Runs on the ports only: the store, the triplet source and the group assembler are passed in.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.rollouts import OnResult, RolloutOptions, RolloutStats, run_rollouts
from domain.groups import FailedRolloutPolicy, RolloutResult, group_metrics, is_trainable, nonconstant_group_indices
from ports.rollout_store import RolloutRequest, RolloutStore, SpanT, TripletSource
from ports.trajectory_groups import GroupAssembler, GroupT, MemberT, TaskGroupT

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupRolloutOptions:
    """How a batch of groups is rolled out and which members train."""

    rollouts: RolloutOptions = field(default_factory=RolloutOptions)
    failed_rollouts: FailedRolloutPolicy = FailedRolloutPolicy.EXCLUDE
    remove_constant_reward_groups: bool = False


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
) -> list[GroupT]:
    """The batch's groups in input order, without the dropped ones."""
    members_P = [list(await assembler.members(task_group)) for task_group in task_groups_P]
    requests = [
        RolloutRequest(task=assembler.task_of(member), mode=mode, resources_id=resources_id)
        for member in itertools.chain(*members_P)
    ]
    results = await run_rollouts(
        requests, store=store, triplets=triplets, options=options.rollouts, on_result=on_result, stats=stats
    )
    groups: list[GroupT] = []
    offset = 0
    for i_group, (task_group, members_G) in enumerate(zip(task_groups_P, members_P, strict=True)):
        results_G = results[offset : offset + len(members_G)]
        offset += len(members_G)
        group = await _assemble(assembler, task_group, members_G, results_G, options)
        if group is None:
            logger.warning("[Batch %d %s] [Group %d] no trainable rollout; group dropped", i_batch, mode, i_group)
            continue
        groups.append(group)
    if options.remove_constant_reward_groups:
        keep = nonconstant_group_indices([assembler.total_rewards(g) for g in groups])
        logger.info("[Batch %d %s] removed %d constant-reward group(s)", i_batch, mode, len(groups) - len(keep))
        groups = [groups[i] for i in keep]
    return groups


async def _assemble(
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT],
    task_group: TaskGroupT,
    members_G: Sequence[MemberT],
    results_G: Sequence[RolloutResult],
    options: GroupRolloutOptions,
) -> GroupT | None:
    reward_policy = options.rollouts.reward_policy
    kept = [
        (member, result)
        for member, result in zip(members_G, results_G, strict=True)
        if is_trainable(result, options.failed_rollouts, reward_policy)
    ]
    if not kept:
        return None
    return await assembler.assemble(
        task_group,
        [member for member, _ in kept],
        [result.trajectory for _, result in kept],
        group_metrics(results_G, options.failed_rollouts, reward_policy),
    )
