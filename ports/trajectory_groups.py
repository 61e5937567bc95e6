"""What the rollout use cases need from a dataset of tasks and from the trainer's group type.

A dataset hands out batches of *task groups* (one task, ``num_envs`` rollouts of it: the cookbook's
``EnvGroupBuilder``). After the rollouts, a ``GroupAssembler`` turns the kept members' reconstructed
trajectories into the trainer's group type (the cookbook's ``TrajectoryGroup``) and summarises a
batch of them. The use cases never name those library types: they are the type variables here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from domain.trajectory import ReconstructedTrajectory

TaskGroupT = TypeVar("TaskGroupT", bound="TaskGroup")
TaskGroupT_co = TypeVar("TaskGroupT_co", bound="TaskGroup", covariant=True)
TaskGroupT_contra = TypeVar("TaskGroupT_contra", bound="TaskGroup", contravariant=True)
MemberT = TypeVar("MemberT")
GroupT = TypeVar("GroupT")


class TaskGroup(Protocol):
    """One GRPO group to roll out."""

    @property
    def num_envs(self) -> int:
        """How many rollouts of the task the group holds."""
        ...


class TaskBatches(Protocol[TaskGroupT_co]):
    """A dataset as batches of task groups (the cookbook's ``RLDataset``)."""

    def __len__(self) -> int: ...

    def get_batch(self, index: int) -> Sequence[TaskGroupT_co]: ...


class GroupAssembler(Protocol[TaskGroupT_contra, MemberT, GroupT]):
    """Expands task groups into members and builds the trainer's groups from their trajectories."""

    async def members(self, task_group: TaskGroupT_contra) -> Sequence[MemberT]:
        """The group's members, one per rollout (the cookbook's environments)."""
        ...

    def task_of(self, member: MemberT) -> object:
        """The task a runner receives for this member, exactly as the dataset holds it."""
        ...

    async def assemble(
        self,
        task_group: TaskGroupT_contra,
        members_G: Sequence[MemberT],
        trajectories_G: Sequence[ReconstructedTrajectory],
        group_metrics: Mapping[str, float],
    ) -> GroupT:
        """The trainer's group of the kept members (group-level rewards added by the task group)."""
        ...

    def total_rewards(self, group: GroupT) -> Sequence[float]:
        """Each member's total reward, for constant-group filtering."""
        ...

    def advantages(self, group: GroupT) -> Sequence[float]:
        """Each member's advantage as training computes it from the group (before KL shaping), for transcripts."""
        ...

    def batch_metrics(self, groups_P: Sequence[GroupT], task_groups_P: Sequence[TaskGroupT_contra]) -> dict[str, float]:
        """Trajectory metrics of a training batch (the cookbook's, tagged per task group)."""
        ...

    def evaluation_metrics(self, groups_P: Sequence[GroupT], *, n_tasks: int) -> dict[str, float]:
        """Trajectory metrics of an evaluation, plus the fraction of tasks with a usable trajectory."""
        ...
