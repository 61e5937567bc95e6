"""GRPO-style groups of rollouts: which members train, and the group metrics the original logged.

A group is the ``G`` rollouts of one task. Each member carries the rollout's terminal status and
its reconstructed trajectory; the functions here decide what is trainable and summarise the group
without touching any store or trainer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from domain.rejections import RejectionReason
from domain.trajectory import ReconstructedTrajectory, RewardPolicy

TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")
"""Agent-lightning's terminal rollout statuses, reported one by one as in the original."""
TIMED_OUT = "timed_out"
"""Status given to a rollout that no runner finished before its deadline (counted as 'others')."""


class FailedRolloutPolicy(StrEnum):
    """What to do with a rollout that did not succeed."""

    EXCLUDE = "exclude"
    """Keep it out of training and count it (default)."""
    TRAIN = "train"
    """Train on whatever was reconstructed, as the original did (a failure then reads as reward 0)."""


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """One finished (or given-up) rollout: its status snapshot and its reconstructed trajectory."""

    rollout_id: str
    status: str
    """Terminal status as first seen (``succeeded``/``failed``/``cancelled``/``timed_out``/...)."""
    trajectory: ReconstructedTrajectory
    reason: str = ""
    """Why the loop ended it itself: ``queue_timeout``, ``run_timeout`` or ``runner_died`` ("" otherwise)."""


@dataclass(frozen=True, slots=True)
class ScoredGroup:
    """One task group's rollouts as they ended, each with the GRPO advantage it trained with."""

    results: tuple[RolloutResult, ...]
    advantages: tuple[float | None, ...]
    """Per result: its total reward minus the mean over the group's trained members (tinker-cookbook's
    ``compute_advantages``, before any KL shaping); None for a member that did not train (excluded, in a
    dropped or constant-reward group, or an evaluation's)."""

    def __post_init__(self) -> None:
        if len(self.results) != len(self.advantages):
            raise ValueError("a scored group needs one advantage (or None) per result")

    @classmethod
    def untrained(cls, results: Sequence[RolloutResult]) -> ScoredGroup:
        """Rollouts no member of which trained (an evaluation's)."""
        return cls(tuple(results), (None,) * len(results))


def is_trainable(result: RolloutResult, failed: FailedRolloutPolicy, reward: RewardPolicy) -> bool:
    """Whether this member may contribute a trajectory to training."""
    if result.trajectory.is_empty:
        return False
    if failed is FailedRolloutPolicy.EXCLUDE and result.status != "succeeded":
        return False
    return not (reward.exclude_without_final_reward and result.trajectory.final_reward_missing)


def status_fractions(statuses_G: Sequence[str]) -> dict[str, float]:
    """``by_group/frac_status_*`` as in the original; the four fractions sum to 1 (0 for no members)."""
    n = len(statuses_G)
    counts = Counter(statuses_G)
    metrics = {f"by_group/frac_status_{s}": (counts[s] / n if n else 0.0) for s in TERMINAL_STATUSES}
    others = n - sum(counts[s] for s in TERMINAL_STATUSES)
    metrics["by_group/frac_status_others"] = others / n if n else 0.0
    return metrics


def group_metrics(
    results_G: Sequence[RolloutResult], failed: FailedRolloutPolicy, reward: RewardPolicy
) -> dict[str, float]:
    """The original's AGL group metrics plus counts of what reconstruction and policies dropped."""
    n = len(results_G)
    metrics = status_fractions([r.status for r in results_G])
    metrics["by_group/frac_empty_traj"] = sum(1 for r in results_G if r.trajectory.is_empty) / n if n else 0.0
    metrics["by_group/frac_timed_out"] = sum(1 for r in results_G if r.status == TIMED_OUT) / n if n else 0.0
    trainable = sum(1 for r in results_G if is_trainable(r, failed, reward))
    metrics["by_group/n_rollouts"] = float(n)
    metrics["by_group/n_excluded"] = float(n - trainable)
    metrics["by_group/frac_final_reward_missing"] = (
        sum(1 for r in results_G if r.trajectory.final_reward_missing) / n if n else 0.0
    )
    metrics.update(rejection_metrics([r.trajectory for r in results_G]))
    return metrics


def rejection_metrics(trajectories: Sequence[ReconstructedTrajectory]) -> dict[str, float]:
    """Counts of kept and rejected triplets, one key per rejection reason (zeros included)."""
    counts: Counter[RejectionReason] = Counter()
    for trajectory in trajectories:
        counts.update(trajectory.rejection_counts())
    metrics = {f"reconstruct/rejected/{reason.value}": float(counts[reason]) for reason in RejectionReason}
    metrics["reconstruct/triplets"] = float(sum(t.n_triplets for t in trajectories))
    metrics["reconstruct/kept"] = float(sum(len(t.transitions) for t in trajectories))
    return metrics


def nonconstant_group_indices(total_rewards_PG: Sequence[Sequence[float]]) -> tuple[int, ...]:
    """Indices of groups whose members' rewards differ (GRPO learns nothing from the others).

    Unlike the cookbook's helper, an all-constant batch yields no group rather than one.
    """
    return tuple(i for i, rewards_G in enumerate(total_rewards_PG) if rewards_G and max(rewards_G) != min(rewards_G))
