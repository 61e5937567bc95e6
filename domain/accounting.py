"""Honest accounting of one batch: what was enqueued, how it ended, and what reached training.

Group metrics only describe the groups that survived; a batch whose every rollout failed would
otherwise log nothing, or a reward of 0 that reads like a bad policy. The account counts the whole
batch, dropped groups included, so an empty batch says why it is empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import astuple, dataclass

from domain.groups import TIMED_OUT, RolloutResult

STATUS_LABELS = {"succeeded": "succeeded", "failed": "failed", TIMED_OUT: "timed out", "cancelled": "cancelled"}
"""The statuses counted one by one, with their wording in ``describe``; any other is ``other``."""


@dataclass(frozen=True, slots=True)
class BatchAccount:
    """Counts over every rollout and group of one batch (build it with ``BatchAccount.of``)."""

    n_enqueued: int = 0
    n_succeeded: int = 0
    n_failed: int = 0
    n_timed_out: int = 0
    n_cancelled: int = 0
    n_other: int = 0
    """Rollouts with any other status (the four named ones and this sum to ``n_enqueued``)."""
    n_trainable: int = 0
    """Members allowed to train, before constant-reward groups are removed."""
    n_trained: int = 0
    """Members of the kept groups: what the trainer sees."""
    n_groups: int = 0
    n_kept: int = 0
    n_dropped_no_trainable: int = 0
    n_dropped_constant: int = 0
    n_without_reward: int = 0
    """Trainable members none of whose turns carried a reward (they train as if rewarded ``missing_reward``)."""
    n_no_policy_call: int = 0
    """Succeeded rollouts without one policy call to train on (no triplet): the agent answered without the policy,
    or its calls failed and it carried on."""

    @classmethod
    def of(
        cls,
        results_PG: Sequence[Sequence[RolloutResult]],
        trainable_PG: Sequence[Sequence[bool]],
        kept_P: Sequence[bool],
    ) -> BatchAccount:
        """The account of a batch: per group its results, which members may train, and whether it was kept."""
        if not len(results_PG) == len(trainable_PG) == len(kept_P):
            raise ValueError("results, trainable flags and kept flags must cover the same groups")
        n_trainable_P = []
        n_without_reward = 0
        for results_G, trainable_G, kept in zip(results_PG, trainable_PG, kept_P, strict=True):
            if len(results_G) != len(trainable_G):
                raise ValueError("each group needs one trainable flag per result")
            n_trainable_P.append(sum(trainable_G))
            n_without_reward += sum(
                1 for r, t in zip(results_G, trainable_G, strict=True) if t and r.trajectory.reward_missing
            )
            if kept and not any(trainable_G):
                raise ValueError("a kept group needs a trainable member")
        statuses = Counter(r.status for results_G in results_PG for r in results_G)
        n_enqueued = sum(statuses.values())
        named = {status: statuses[status] for status in STATUS_LABELS}
        n_dropped_no_trainable = sum(1 for n in n_trainable_P if n == 0)
        n_kept = sum(kept_P)
        n_no_policy_call = sum(
            1 for results_G in results_PG for r in results_G if r.status == "succeeded" and r.trajectory.n_triplets == 0
        )
        return cls(
            n_enqueued=n_enqueued,
            n_succeeded=named["succeeded"],
            n_failed=named["failed"],
            n_timed_out=named[TIMED_OUT],
            n_cancelled=named["cancelled"],
            n_other=n_enqueued - sum(named.values()),
            n_trainable=sum(n_trainable_P),
            n_trained=sum(n for n, kept in zip(n_trainable_P, kept_P, strict=True) if kept),
            n_groups=len(kept_P),
            n_kept=n_kept,
            n_dropped_no_trainable=n_dropped_no_trainable,
            n_dropped_constant=len(kept_P) - n_kept - n_dropped_no_trainable,
            n_without_reward=n_without_reward,
            n_no_policy_call=n_no_policy_call,
        )

    @classmethod
    def merge(cls, accounts: Sequence[BatchAccount]) -> BatchAccount:
        """One account over several (the groups an asynchronous step trains, each rolled out on its own)."""
        if not accounts:
            return cls()
        return cls(*(sum(column) for column in zip(*(astuple(a) for a in accounts), strict=True)))

    @property
    def n_excluded(self) -> int:
        """Rollouts left out of training for any reason (not trainable, or in a constant group)."""
        return self.n_enqueued - self.n_trained

    @property
    def has_trainable(self) -> bool:
        """Whether any rollout could train (constant-reward removal aside: that is not a failure)."""
        return self.n_trainable > 0

    @property
    def has_reward(self) -> bool:
        """Whether any trainable rollout carried a reward (a batch without one teaches nothing)."""
        return self.n_trainable > self.n_without_reward

    def status_counts(self) -> dict[str, int]:
        """Rollouts per status label, the named statuses first, then ``other``."""
        counts = dict(zip(STATUS_LABELS.values(), self._named_counts(), strict=True))
        counts["other"] = self.n_other
        return counts

    def metrics(self) -> dict[str, float]:
        """``rollouts/n_*`` and ``groups/n_*`` for the batch's metrics line."""
        return {
            "rollouts/n_enqueued": float(self.n_enqueued),
            "rollouts/n_succeeded": float(self.n_succeeded),
            "rollouts/n_failed": float(self.n_failed),
            "rollouts/n_timed_out": float(self.n_timed_out),
            "rollouts/n_cancelled": float(self.n_cancelled),
            "rollouts/n_other": float(self.n_other),
            "rollouts/n_excluded": float(self.n_excluded),
            "groups/n_kept": float(self.n_kept),
            "groups/n_dropped_no_trainable": float(self.n_dropped_no_trainable),
            "groups/n_dropped_constant": float(self.n_dropped_constant),
            "rollouts/n_without_reward": float(self.n_without_reward),
            "rollouts/n_no_policy_call": float(self.n_no_policy_call),
        }

    def describe(self) -> str:
        """One line for a human, the most common status first (e.g. ``all 16 rollouts failed``)."""
        if self.n_enqueued == 0:
            return "no rollouts"
        counts = sorted(((n, label) for label, n in self.status_counts().items() if n), key=lambda c: -c[0])
        n_top, top = counts[0]
        if n_top == self.n_enqueued and top != "succeeded" and self.n_trainable == 0:
            return f"all {self.n_enqueued} rollouts {top}"
        parts = [f"{n} {label}{self._no_call(label)}" for n, label in counts] + [f"{self.n_trainable} trainable"]
        if self.n_without_reward:
            parts.append(f"{self.n_without_reward} without reward")
        if self.n_dropped_constant:
            parts.append(f"{self.n_dropped_constant} constant-reward group(s) dropped")
        return f"{self.n_enqueued} rollouts: " + ", ".join(parts)

    def _no_call(self, label: str) -> str:
        """What ``describe`` adds to the succeeded count when some of them never called the policy."""
        if label != "succeeded" or not self.n_no_policy_call:
            return ""
        if self.n_no_policy_call == self.n_succeeded:
            return " but none called the policy endpoint"
        return f" ({self.n_no_policy_call} without calling the policy endpoint)"

    def _named_counts(self) -> tuple[int, int, int, int]:
        return (self.n_succeeded, self.n_failed, self.n_timed_out, self.n_cancelled)


MISSING_REWARD_CAUSES = (
    "the agent neither returned a reward nor called agl.emit_reward, its runner's span export failed, "
    "or each reward came before the first trained call"
)


def missing_reward_warning(i_batch: int, account: BatchAccount) -> str | None:
    """One line for a batch whose trainable rollouts came back without a reward, with the likely causes."""
    if not account.n_without_reward:
        return None
    share = f"{account.n_without_reward} of {account.n_trainable}"
    return f"batch {i_batch}: {share} trainable rollouts carried no reward ({MISSING_REWARD_CAUSES})"
