"""The batch account: every rollout and group counted, dropped ones included (pure domain)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.accounting import STATUS_LABELS, BatchAccount, missing_reward_warning
from domain.groups import TIMED_OUT, RolloutResult
from domain.trajectory import reconstruct_trajectory
from domain.triplets import RawTriplet

STATUSES = ["succeeded", "failed", "cancelled", TIMED_OUT, "running"]
Member = tuple[str, bool]
"""(status, trainable)"""


def result(status: str) -> RolloutResult:
    """A rollout with ``status`` and a rewarded one-turn trajectory (whether it may train is the caller's flag)."""
    return RolloutResult(rollout_id=f"ro-{status}", status=status, trajectory=rewarded(1.0).trajectory)


def account_of(batch_PG: list[list[Member]], kept_P: list[bool]) -> BatchAccount:
    return BatchAccount.of(
        [[result(status) for status, _ in group] for group in batch_PG],
        [[trainable for _, trainable in group] for group in batch_PG],
        kept_P,
    )


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[Member]], list[bool]]:
    """Groups of (status, trainable) members, and which groups were kept (only ones with a trainable member)."""
    member = st.tuples(st.sampled_from(STATUSES), st.booleans())
    batch_PG = draw(st.lists(st.lists(member, min_size=1, max_size=6), max_size=6))
    kept_P = [any(t for _, t in group) and draw(st.booleans()) for group in batch_PG]
    return batch_PG, kept_P


@given(batches())
def test_counts_by_status_sum_to_the_enqueued_rollouts(batch: tuple[list[list[Member]], list[bool]]) -> None:
    account = account_of(*batch)
    assert account.n_enqueued == sum(len(group) for group in batch[0])
    assert sum(account.status_counts().values()) == account.n_enqueued
    metrics = account.metrics()
    by_status = ("n_succeeded", "n_failed", "n_timed_out", "n_cancelled", "n_other")
    assert sum(metrics[f"rollouts/{key}"] for key in by_status) == metrics["rollouts/n_enqueued"]


@given(batches())
def test_excluded_are_the_enqueued_minus_the_trained_members(batch: tuple[list[list[Member]], list[bool]]) -> None:
    batch_PG, kept_P = batch
    account = account_of(batch_PG, kept_P)
    trained = sum(t for group, kept in zip(batch_PG, kept_P, strict=True) if kept for _, t in group)
    assert account.n_trained == trained
    assert account.metrics()["rollouts/n_excluded"] == account.n_enqueued - trained
    assert account.n_trained <= account.n_trainable <= account.n_enqueued


@given(batches())
def test_kept_and_dropped_groups_add_up_to_the_batch(batch: tuple[list[list[Member]], list[bool]]) -> None:
    batch_PG, kept_P = batch
    metrics = account_of(batch_PG, kept_P).metrics()
    kept, no_trainable, constant = (
        metrics[f"groups/{key}"] for key in ("n_kept", "n_dropped_no_trainable", "n_dropped_constant")
    )
    assert kept + no_trainable + constant == len(batch_PG)
    assert kept == sum(kept_P)
    assert no_trainable == sum(1 for group in batch_PG if not any(t for _, t in group))


@given(batches())
def test_describe_is_one_line_naming_the_dominant_status(batch: tuple[list[list[Member]], list[bool]]) -> None:
    account = account_of(*batch)
    line = account.describe()
    assert "\n" not in line
    counts = account.status_counts()
    if account.n_enqueued:
        dominant = max(counts, key=lambda label: counts[label])
        assert dominant in line
        assert str(counts[dominant]) in line
    else:
        assert line == "no rollouts"


def test_a_batch_whose_every_rollout_failed_says_so() -> None:
    account = account_of([[("failed", False)] * 8, [("failed", False)] * 8], [False, False])
    assert account.describe() == "all 16 rollouts failed"
    assert not account.has_trainable
    assert account.metrics()["rollouts/n_excluded"] == 16.0
    assert account.metrics()["groups/n_dropped_no_trainable"] == 2.0


def test_a_mixed_empty_batch_lists_its_statuses_most_common_first() -> None:
    account = account_of([[(TIMED_OUT, False)] * 6 + [("failed", False)] * 2, [("failed", False)] * 8], [False, False])
    assert account.describe() == "16 rollouts: 10 failed, 6 timed out, 0 trainable"


def test_constant_reward_groups_are_excluded_but_do_not_make_the_batch_untrainable() -> None:
    account = account_of([[("succeeded", True)] * 4, [("succeeded", True)] * 4], [False, True])
    assert account.has_trainable
    assert (account.n_trainable, account.n_trained, account.n_excluded) == (8, 4, 4)
    assert account.metrics()["groups/n_dropped_constant"] == 1.0
    assert account.describe() == "8 rollouts: 8 succeeded, 8 trainable, 1 constant-reward group(s) dropped"


def no_call(status: str = "succeeded") -> RolloutResult:
    """A rollout that never called the policy: no triplet at all."""
    return RolloutResult(rollout_id="ro", status=status, trajectory=reconstruct_trajectory([]))


def test_a_batch_whose_rollouts_succeeded_without_calling_the_policy_says_so() -> None:
    account = BatchAccount.of([[no_call()] * 2, [no_call()] * 2], [[False] * 2] * 2, [False, False])
    assert account.describe() == "4 rollouts: 4 succeeded but none called the policy endpoint, 0 trainable"
    assert account.metrics()["rollouts/n_no_policy_call"] == 4.0


def test_some_rollouts_without_a_policy_call_are_counted_among_the_succeeded() -> None:
    account = BatchAccount.of(
        [[no_call(), result("succeeded"), result("succeeded")], [no_call("failed")]],
        [[False, True, True], [False]],
        [True, False],
    )
    assert (
        account.describe() == "4 rollouts: 3 succeeded (1 without calling the policy endpoint), 1 failed, 2 trainable"
    )
    assert account.n_no_policy_call == 1  # a failed rollout's missing call is its failure's doing, not counted


def test_every_status_label_is_reported() -> None:
    assert set(STATUS_LABELS) == {"succeeded", "failed", TIMED_OUT, "cancelled"}
    assert list(account_of([], []).status_counts()) == [*STATUS_LABELS.values(), "other"]


@pytest.mark.parametrize(
    ("trainable_PG", "kept_P"),
    [([[False]], [True]), ([[True]], [True, False]), ([[True, False]], [True])],
    ids=["kept-without-trainable", "groups-differ", "flags-differ"],
)
def test_inconsistent_inputs_are_refused(trainable_PG: list[list[bool]], kept_P: list[bool]) -> None:
    with pytest.raises(ValueError):
        BatchAccount.of([[result("succeeded")]], trainable_PG, kept_P)


@given(st.lists(st.builds(BatchAccount, *[st.integers(0, 50)] * 12), max_size=5))
def test_merged_accounts_sum_every_count(accounts: list[BatchAccount]) -> None:
    merged = BatchAccount.merge(accounts)

    assert merged.n_enqueued == sum(a.n_enqueued for a in accounts)
    assert merged.n_trained == sum(a.n_trained for a in accounts)
    assert merged.n_dropped_constant == sum(a.n_dropped_constant for a in accounts)
    assert merged.n_excluded == sum(a.n_excluded for a in accounts)
    assert merged.n_no_policy_call == sum(a.n_no_policy_call for a in accounts)


def rewarded(reward: float | None) -> RolloutResult:
    """A succeeded one-turn rollout whose turn carried ``reward`` (None: no reward arrived)."""
    triplet = RawTriplet(
        prompt={"token_ids": [1, 2]}, response={"token_ids": [3], "logprobs": [{"logprob": -0.5}]}, reward=reward
    )
    return RolloutResult(rollout_id="ro", status="succeeded", trajectory=reconstruct_trajectory([triplet]))


@given(st.lists(st.lists(st.sampled_from([None, 0.0, 1.0]), min_size=1, max_size=4), min_size=1, max_size=4))
def test_rollouts_without_a_reward_are_counted_and_warned_about(rewards_PG: list[list[float | None]]) -> None:
    account = BatchAccount.of(
        [[rewarded(r) for r in group] for group in rewards_PG],
        [[True] * len(group) for group in rewards_PG],
        [True] * len(rewards_PG),
    )
    missing = sum(r is None for group in rewards_PG for r in group)
    assert account.n_without_reward == missing
    assert account.metrics()["rollouts/n_without_reward"] == missing
    assert account.has_reward == (missing < account.n_trainable)  # a reward of 0.0 is a reward
    warning = missing_reward_warning(7, account)
    if missing:
        assert warning is not None
        assert warning.startswith(f"batch 7: {missing} of {account.n_trainable} trainable rollouts carried no reward")
        assert "agl.emit_reward" in warning and "span export" in warning
    else:
        assert warning is None


def test_a_streak_of_batches_without_any_reward_ends_the_run_naming_the_causes() -> None:
    from app.usecases.steps import EmptyStreak

    def batch(*rewards: float | None) -> BatchAccount:
        return BatchAccount.of([[rewarded(r) for r in rewards]], [[True] * len(rewards)], [True])

    streak = EmptyStreak(limit=2)
    assert not streak.record(0, batch(None, None))
    assert not streak.record(1, batch(None, 0.0))  # one reward (even 0.0) breaks the streak
    assert not streak.record(2, batch(None, None))
    assert streak.record(3, batch(None, None))
    message = str(streak.error())
    assert message.startswith("2 consecutive batches had no reward (batch 3: 2 rollouts: 2 succeeded, 2 trainable, ")
    assert "2 without reward" in message and "agl.emit_reward" in message
