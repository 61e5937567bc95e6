"""Which call of a rollout each reward belongs to, by the order both sides share: no clock.

The endpoint that serves a call and the runner whose agent emits a reward may be different machines
whose clocks disagree by more than the time between a reply and its reward. Both draw numbers from
one counter instead: the store's span sequence ids, strictly increasing within a rollout. A served
call takes its number once it has been sampled, before the agent sees the reply; a reward takes its
number when it is emitted (or, returned by the agent, when the rollout ends). So a call numbered
below a reward had ended before the reward was emitted, on any clock.

Each reward goes to the latest trained call numbered below it; rewards for one call add up. A reward
with no trained call before it (emitted before the first trained call ended) still belongs to the
rollout's return: it goes to the earliest trained call and is counted, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NumberedCall:
    """A trained call: its key (the record's span id), its sequence number, and which choice of the request."""

    key: str
    sequence_id: int
    choice: int = 0


@dataclass(frozen=True, slots=True)
class NumberedReward:
    """A reward and the sequence number it took when it was emitted."""

    sequence_id: int
    value: float


@dataclass(frozen=True, slots=True)
class RewardAttribution:
    """The reward each call earned, and what could not be placed after a call."""

    rewards: Mapping[str, float]
    """Summed reward per call key; calls that earned nothing are absent."""
    before_first_call: int
    """Rewards numbered below every trained call: credited to the earliest call (counted, kept in the return)."""
    without_call: int
    """Rewards of a rollout with no trained call at all: nothing to credit them to."""


def attribute_rewards(calls: Sequence[NumberedCall], rewards: Sequence[NumberedReward]) -> RewardAttribution:
    """Each reward to the latest call numbered below it (ties within a request: the higher choice).

    The result does not depend on the order of either input, and the rewards credited sum to all the
    rewards given whenever there is at least one call.
    """
    ordered = sorted(calls, key=lambda c: (c.sequence_id, c.choice))
    credited: dict[str, float] = {}
    before_first = without = 0
    for reward in rewards:
        before = [c for c in ordered if c.sequence_id < reward.sequence_id]
        if before:
            target = before[-1]
        elif ordered:
            target, before_first = ordered[0], before_first + 1
        else:
            without += 1
            continue
        credited[target.key] = credited.get(target.key, 0.0) + reward.value
    return RewardAttribution(rewards=credited, before_first_call=before_first, without_call=without)


def last_in_call_order(sequence_ids: Sequence[int | None]) -> int | None:
    """Index of the call made last (the highest sequence number), whatever order the calls are listed in.

    Calls are listed in branch order where an agent made parallel calls, so the last listed is not always
    the last made. Without any number, the last listed; ``None`` for no call.
    """
    if not sequence_ids:
        return None
    numbered = [(s, i) for i, s in enumerate(sequence_ids) if s is not None]
    return max(numbered)[1] if numbered else len(sequence_ids) - 1
