"""Triplets from the policy endpoint's own completion records, whatever client the agent used.

An Agent-lightning ``TraceToTripletBase``: pass it wherever an adapter is taken (``agl.Trainer``,
the seed-compatible functions). Each ``agl_tinker.completion`` span (``adapters.endpoint_capture``)
becomes a triplet with the exact prompt and sampled token ids and logprobs; calls to any other LLM
leave no such span and are never trained.

Only what the agent kept is trained: of a request with ``n > 1`` choices, the choices a later
request continues token for token; when no later request continues any of them (the last turn)
none is trained and the request is counted in ``ambiguous_choices`` (``domain.multiturn.kept_choices``).
Triplets come in branch order (each completion, then the completions that continue it), so
parallel calls of one rollout merge the same way whatever order they finished in.

Rewards come from the agent's reward spans (``agl.emit_reward`` or a returned float). Agent-lightning's
``TracerTraceToTriplet`` (``RewardMatchPolicy.FIRST_OCCURRENCE``) gives each reward to the latest LLM
call that ended before it, and drops a second reward for the same call. Here each reward goes to
the latest *trained* completion that ended before the reward started, and several rewards for one
completion add up (two ``agl.emit_reward(0.5)`` after one call: 1.0). A reward with no trained
completion before it (emitted before the first call ended, or after only untrained choices) is
counted in ``unattributed_rewards`` and logged, never silently dropped.

Where the agent's client also traced a policy call with token ids (the ``openai`` client through
the AgentOps tracer), those ids are checked against the records: a traced reply that matches no
record is counted in ``disagreements`` and logged, since it means one of the two sources is wrong.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import cast

from agentlightning import Span, TraceToTripletBase, Triplet
from agentlightning.emitter.reward import get_reward_value

from adapters.endpoint_capture import (
    CHOICE,
    COMPLETION_SPAN,
    EXTENDS,
    FINISH_REASON,
    LOGPROBS,
    N_CHOICES,
    POLICY_VERSION,
    PREFIX,
    PROMPT_IDS,
    RESPONSE_IDS,
)
from domain.multiturn import ServedChoice, kept_choices

logger = logging.getLogger(__name__)
CLIENT_LLM_CALL = re.compile(r"openai\.chat\.completion")
CLIENT_RESPONSE_IDS = "response_token_ids"


def _time(value: float | None) -> float:
    return value if value is not None else 0.0


class EndpointTraceToTriplet(TraceToTripletBase):
    """One triplet per kept completion choice the endpoint served to the rollout, in branch order."""

    def __init__(self) -> None:
        super().__init__()
        self.disagreements = 0
        """Client-traced policy replies (with token ids) that match no endpoint record, so far."""
        self.ambiguous_choices = 0
        """Requests with ``n > 1`` whose kept choice could not be known (none of their choices trained), so far."""
        self.unkept_choices = 0
        """Choices of ``n > 1`` requests the agent did not continue (never trained), so far."""
        self.unattributed_rewards = 0
        """Rewards with no trained completion before them, so far."""

    def adapt(self, source: Sequence[Span], /) -> list[Triplet]:
        spans = list(source)
        records = {_served_choice(s): s for s in spans if s.name == COMPLETION_SPAN}
        self._check_client_spans(spans, list(records.values()))
        kept = kept_choices(list(records))
        if kept.ambiguous_calls:
            rollout = next(iter(records.values())).rollout_id
            message = "rollout %s: %d request(s) with n > 1 not continued: none of their choices is trained"
            logger.info(message, rollout, kept.ambiguous_calls)
        self.ambiguous_choices += kept.ambiguous_calls
        self.unkept_choices += kept.unkept_choices
        completions = [records[c] for c in kept.trained]
        rewards, unattributed = match_rewards(spans, completions)
        if unattributed:
            self.unattributed_rewards += unattributed
            logger.warning(
                "rollout %s: %d reward(s) emitted before any trained completion ended",
                spans[0].rollout_id if spans else "?",
                unattributed,
            )
        return [
            Triplet(
                prompt={"token_ids": list(_ints(span.attributes.get(PROMPT_IDS)))},
                response={
                    "token_ids": list(_ints(span.attributes.get(RESPONSE_IDS))),
                    "logprobs": list(_floats(span.attributes.get(LOGPROBS))),
                },
                reward=rewards.get(span.span_id),
                metadata={
                    "sequence_id": span.sequence_id,
                    "choice": span.attributes.get(CHOICE, 0),
                    "policy_version": span.attributes.get(POLICY_VERSION),
                    "finish_reason": span.attributes.get(FINISH_REASON),
                    "prefix": span.attributes.get(PREFIX),
                },
            )
            for span in completions
        ]

    def _check_client_spans(self, spans: Sequence[Span], completions: Sequence[Span]) -> None:
        recorded = {tuple(_ints(c.attributes.get(RESPONSE_IDS))) for c in completions}
        for span in spans:
            traced = tuple(_ints(span.attributes.get(CLIENT_RESPONSE_IDS)))
            if not traced or not CLIENT_LLM_CALL.search(span.name) or span.name == COMPLETION_SPAN:
                continue
            if traced not in recorded and recorded:
                self.disagreements += 1
                message = "rollout %s: a client-traced reply of %d tokens matches no endpoint record"
                logger.warning(message, span.rollout_id, len(traced))


def _served_choice(span: Span) -> ServedChoice:
    choice, n_choices = span.attributes.get(CHOICE, 0), span.attributes.get(N_CHOICES, 1)
    extends = _ints(span.attributes.get(EXTENDS))
    parent = (extends[0], extends[1]) if len(extends) == 2 else None
    return ServedChoice(
        sequence_id=span.sequence_id,
        choice=choice if isinstance(choice, int) else 0,
        n_choices=n_choices if isinstance(n_choices, int) else 1,
        extends=cast(tuple[int, int] | None, parent),
    )


def _ints(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def _floats(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def match_rewards(spans: Sequence[Span], completions: Sequence[Span]) -> tuple[dict[str, float], int]:
    """Reward per trained completion span id, and how many rewards had no trained completion before them.

    Spans are walked by start time; each reward goes to the trained completion that ended last at or
    before the reward started (ties: the later request), and rewards for the same completion add up.
    """
    by_id = {s.span_id: s for s in completions}
    rewards: dict[str, float] = {}
    unattributed = 0
    for span in spans:
        value = get_reward_value(span)
        if value is None or span.span_id in by_id:
            continue
        before = [c for c in completions if _time(c.end_time) <= _time(span.start_time)]
        if not before:
            unattributed += 1
            continue
        latest = max(before, key=lambda c: (_time(c.end_time), c.sequence_id))
        rewards[latest.span_id] = rewards.get(latest.span_id, 0.0) + value
    return rewards, unattributed
