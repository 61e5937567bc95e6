"""Triplets from the policy endpoint's own completion records, whatever client the agent used.

An Agent-lightning ``TraceToTripletBase``: pass it wherever an adapter is taken (``agl.Trainer``,
the seed-compatible functions). Each ``agl_tinker.completion`` span (``adapters.endpoint_capture``)
becomes a triplet with the exact prompt and sampled token ids and logprobs; calls to any other LLM
leave no such span and are never trained. Rewards come from the agent's reward spans
(``agl.emit_reward`` or a returned float) and are matched the way ``TracerTraceToTriplet``'s
default policy matches them: each reward goes to the latest completion that ended before it and
has no reward yet.

Where the agent's client also traced a policy call with token ids (the ``openai`` client through
the AgentOps tracer), those ids are checked against the records: a traced reply that matches no
record is counted in ``disagreements`` and logged, since it means one of the two sources is wrong.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from agentlightning import Span, TraceToTripletBase, Triplet
from agentlightning.emitter.reward import get_reward_value

from adapters.endpoint_capture import (
    COMPLETION_SPAN,
    FINISH_REASON,
    LOGPROBS,
    POLICY_VERSION,
    PREFIX,
    PROMPT_IDS,
    RESPONSE_IDS,
)

logger = logging.getLogger(__name__)
CLIENT_LLM_CALL = re.compile(r"openai\.chat\.completion")
CLIENT_RESPONSE_IDS = "response_token_ids"


def _time(value: float | None) -> float:
    return value if value is not None else 0.0


class EndpointTraceToTriplet(TraceToTripletBase):
    """One triplet per completion the endpoint served to the rollout, in request order."""

    def __init__(self) -> None:
        super().__init__()
        self.disagreements = 0
        """Client-traced policy replies (with token ids) that match no endpoint record, so far."""

    def adapt(self, source: Sequence[Span], /) -> list[Triplet]:
        spans = list(source)
        completions = sorted((s for s in spans if s.name == COMPLETION_SPAN), key=lambda s: s.sequence_id)
        self._check_client_spans(spans, completions)
        rewards = _match_rewards(spans, completions)
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


def _ints(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def _floats(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def _match_rewards(spans: Sequence[Span], completions: Sequence[Span]) -> dict[str, float | None]:
    """Reward per completion span id: walk spans by start time, give each reward to the latest open call."""
    completion_ids = {s.span_id for s in completions}
    ended: list[tuple[str, float]] = []
    rewards: dict[str, float | None] = {}
    for span in sorted(spans, key=lambda s: _time(s.start_time)):
        if span.span_id in completion_ids:
            ended.append((span.span_id, _time(span.end_time)))
            continue
        value = get_reward_value(span)
        if value is None:
            continue
        for span_id, end_time in reversed(ended):
            if end_time > _time(span.start_time) or span_id in rewards:
                continue
            rewards[span_id] = value
            break
    return rewards
