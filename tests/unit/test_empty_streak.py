"""The error of a run that cannot train: the batch's account, then the likeliest cause."""

from __future__ import annotations

from app.usecases.steps import EmptyStreak
from domain.accounting import BatchAccount
from domain.groups import RolloutResult
from domain.trajectory import EMPTY_TRAJECTORY

NO_CALL = RolloutResult(rollout_id="ro-1", status="succeeded", trajectory=EMPTY_TRAJECTORY)


def test_rollouts_that_succeeded_without_the_policy_are_named_with_the_runners_first_error() -> None:
    streak = EmptyStreak(limit=2)
    account = BatchAccount.of([[NO_CALL] * 4], [[False] * 4], [False])
    assert not streak.record(0, account)
    assert streak.record(1, account)
    message = str(streak.error(agent_error="tool 'calculator' failed: ConnectionError: the MCP server is down"))
    assert message == (
        "2 consecutive batches had no trainable rollout (batch 1: 4 rollouts: 4 succeeded but none called the "
        "policy endpoint, 0 trainable); the runners' first logged error: tool 'calculator' failed: ConnectionError: "
        "the MCP server is down"
    )
    assert str(streak.error()).endswith("0 trainable)")  # nothing logged: nothing added
