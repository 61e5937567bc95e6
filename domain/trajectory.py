"""Rebuild a token-level trajectory from a rollout's ordered triplets.

The rules, each a fix of the original Agent-lightning example:

* A triplet that cannot become a transition is rejected with a typed reason and counted; its
  tokens still appear as context in later observations (they are part of the next prompt), so they
  are effectively masked out of the loss and the cookbook never sees an action without logprobs.
* The reward of a rejected triplet is not lost: it is added to the last kept transition, so the
  trajectory's total reward (what GRPO advantages use) is the same as the agent's.
* ``episode_done`` marks the last *kept* transition, exactly once per non-empty trajectory.
* A missing reward is an explicit policy: ``RewardPolicy.missing_reward`` for turns without one
  (0.0 by default, as the original), and the trajectory is flagged when the final turn has none:
  the call made last, by call order (``sequence_id``), which is not the last listed with parallel calls.
* Each transition keeps the policy version that sampled it (when the source said), so an
  asynchronous trainer can measure how far off-policy the trajectory is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from returns.pipeline import is_successful
from returns.result import Failure, Success

from domain.rejections import RejectionReason, TripletRejection
from domain.reward_order import last_in_call_order
from domain.triplets import RawTriplet, parse_reward, parse_triplet

METRIC_FINAL_STEP = "reward/final_step"
METRIC_NOT_NULL = "reward/not_null"


@dataclass(frozen=True, slots=True)
class RewardPolicy:
    """How reconstruction fills rewards the agent did not emit."""

    missing_reward: float = 0.0
    """Reward given to a turn with no reward of its own (the original used 0.0)."""
    exclude_without_final_reward: bool = False
    """Whether a trajectory whose final turn has no reward is kept out of training."""


@dataclass(frozen=True, slots=True)
class TokenTransition:
    """One kept model call: what the model saw, what it sampled, and what it earned."""

    ob: tuple[int, ...]
    """Observation (prompt) token ids."""
    ac: tuple[int, ...]
    """Action (response) token ids."""
    logprobs: tuple[float, ...]
    """Sampling logprob per action token, same length as ``ac``."""
    reward: float
    episode_done: bool
    metrics: Mapping[str, float] = field(default_factory=dict)
    policy_version: int | None = None
    """Version of the policy that sampled ``ac``; ``None`` when the source did not say (client spans)."""


@dataclass(frozen=True, slots=True)
class ReconstructedTrajectory:
    """The transitions rebuilt from one rollout and an account of everything that was dropped."""

    transitions: tuple[TokenTransition, ...]
    rejections: tuple[TripletRejection, ...]
    n_triplets: int
    """How many triplets the adapter produced (kept + rejected)."""
    final_reward_missing: bool
    """True when the rollout's last call carried no usable reward (or there was no triplet). The last call is the
    one made last (highest ``sequence_id`` in the triplets' metadata), not the last listed: triplets of parallel
    calls come in branch order."""

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.transitions)

    @property
    def is_empty(self) -> bool:
        return not self.transitions

    @property
    def reward_missing(self) -> bool:
        """No triplet carried a usable reward: whatever the agent meant to reward never arrived."""
        return self.final_reward_missing and not any(t.metrics.get(METRIC_NOT_NULL) for t in self.transitions)

    @property
    def oldest_policy_version(self) -> int | None:
        """The oldest policy that sampled a kept transition: what staleness is measured from."""
        versions = [t.policy_version for t in self.transitions if t.policy_version is not None]
        return min(versions, default=None)

    def rejection_counts(self) -> Counter[RejectionReason]:
        return Counter(r.reason for r in self.rejections)


EMPTY_TRAJECTORY = ReconstructedTrajectory(transitions=(), rejections=(), n_triplets=0, final_reward_missing=True)


def _sequence_id(metadata: object) -> int | None:
    """The call's place in the rollout's order (the store's span sequence id), where the source gave it."""
    value = metadata.get("sequence_id") if isinstance(metadata, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usable_reward(raw: object) -> float | None:
    """The reward if it is usable, else ``None`` (rejected rewards are reported by the parser)."""
    result = parse_reward(raw)
    return result.unwrap() if is_successful(result) else None


def reconstruct_trajectory(
    triplets_T: Sequence[RawTriplet], policy: RewardPolicy = RewardPolicy(), vocab_size: int | None = None
) -> ReconstructedTrajectory:
    """Turn ordered triplets into transitions, keeping order and token content as they came.

    Never raises on any input: every triplet is either a transition or a counted rejection
    (with ``vocab_size``, also those holding ids beyond the policy's vocabulary).
    """
    kept: list[TokenTransition] = []
    rejections: list[TripletRejection] = []
    orphan_reward = 0.0
    for index, triplet in enumerate(triplets_T):
        match parse_triplet(index, triplet, vocab_size):
            case Success(turn):
                reward = policy.missing_reward if turn.reward is None else turn.reward
                kept.append(
                    TokenTransition(
                        ob=turn.prompt_tokens,
                        ac=turn.response_tokens,
                        logprobs=turn.response_logprobs,
                        reward=reward,
                        episode_done=False,
                        metrics={METRIC_NOT_NULL: 0.0 if turn.reward is None else 1.0},
                        policy_version=turn.policy_version,
                    )
                )
            case Failure(rejection):
                rejections.append(rejection)
                # A rejected turn's finite reward still belongs to the trajectory's return.
                orphan_reward += _usable_reward(triplet.reward) or 0.0

    last = last_in_call_order([_sequence_id(t.metadata) for t in triplets_T])
    final_reward = _usable_reward(triplets_T[last].reward) if last is not None else None
    if kept:
        closing = kept[-1]
        metrics = dict(closing.metrics)
        if final_reward is not None:
            metrics[METRIC_FINAL_STEP] = final_reward
        kept[-1] = replace(closing, reward=closing.reward + orphan_reward, episode_done=True, metrics=metrics)
    return ReconstructedTrajectory(
        transitions=tuple(kept),
        rejections=tuple(rejections),
        n_triplets=len(triplets_T),
        final_reward_missing=final_reward is None,
    )
