"""Triplets from the policy endpoint's own completion records, whatever client the agent used.

An Agent-lightning ``TraceToTripletBase``: pass it wherever an adapter is taken (``agl.Trainer``,
the seed-compatible functions). Each ``agl_tinker.completion`` span (``adapters.endpoint.capture``)
becomes a triplet with the exact prompt and sampled token ids and logprobs; calls to any other LLM
leave no such span and are never trained.

Only what the agent kept is trained: of a request with ``n > 1`` choices, the choices a later
request continues token for token; when no later request continues any of them (the last turn)
none is trained and the request is counted in ``ambiguous_choices`` (``domain.multiturn.kept_choices``).
Triplets come in branch order (each completion, then the completions that continue it), so
parallel calls of one rollout merge the same way whatever order they finished in.

Rewards come from the agent's reward spans (``agl.emit_reward`` or a returned float). Agent-lightning's
``TracerTraceToTriplet`` (``RewardMatchPolicy.FIRST_OCCURRENCE``) gives each reward to the latest LLM
call that ended before it, by the clock, and drops a second reward for the same call. Here each reward
goes to the latest *trained* completion numbered below it in the store's span sequence, which the
endpoint and the runner share whatever their clocks say (``domain.reward_order``), and several rewards
for one completion add up (two ``agl.emit_reward(0.5)`` after one call: 1.0). A reward with no trained
completion before it (emitted before the first call ended, or after only untrained choices) stays in
the return: it goes to the earliest trained completion, and is counted and logged. A reward the runner
could not number when it was emitted is placed by its number at the rollout's end and counted
(``rewards/n_order_unknown``).

Where the agent's client also traced a policy call with token ids (the ``openai`` client through
the AgentOps tracer), those ids are checked against the records: a traced reply that matches no
record is counted in ``disagreements`` and logged, since it means one of the two sources is wrong.

With ``agent_match`` (a regular expression, as ``TracerTraceToTriplet(agent_match=...)``), only the calls
made inside an agent whose name it finds are trained (``domain.agent_match``: the client-side span that
carries the record's response id and its nearest agent ancestor, else the innermost agent spans around
the record in time; agent names as Agent-lightning's ``TraceTree.agent_name`` reads them). The others are
counted per verdict (``take_metrics``: ``agent_match/calls_*``), and rewards go to the latest *trained*
call before them, as above. A batch in which the regex trained no call says so in one warning line that
names the agents seen.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import cast

from agentlightning import Span, TraceToTripletBase, Triplet
from agentlightning.adapter.triplet import TraceTree
from agentlightning.emitter.reward import get_reward_value

from adapters.endpoint.capture import (
    CHOICE,
    COMPLETION_SPAN,
    EXTENDS,
    FINISH_REASON,
    LOGPROBS,
    N_CHOICES,
    POLICY_VERSION,
    PREFIX,
    PROMPT_IDS,
    RESPONSE_ID,
    RESPONSE_IDS,
)
from domain.agent_match import AgentCalls, CallVerdict, PolicyCall, TraceSpan, call_agents, judge
from domain.multiturn import ServedChoice, kept_choices
from domain.reward_order import NumberedCall, NumberedReward, RewardAttribution, attribute_rewards

logger = logging.getLogger(__name__)
CLIENT_LLM_CALL = re.compile(r"openai\.chat\.completion")
CLIENT_RESPONSE_IDS = "response_token_ids"
CLIENT_RESPONSE_ID = ("gen_ai.response.id", "agentlightning.operation.output.id")
"""Where a client-side LLM-call span keeps the response id (what Agent-lightning's dedup reads)."""
REWARD_ORDER_UNKNOWN = "agl_tinker.reward_order_unknown"
"""Set on a reward span the runner could not number when it was emitted (it was numbered at the rollout's end)."""


def _time(value: float | None) -> float:
    return value if value is not None else 0.0


class EndpointTraceToTriplet(TraceToTripletBase):
    """One triplet per kept completion choice the endpoint served to the rollout, in branch order."""

    def __init__(self, agent_match: str | None = None) -> None:
        super().__init__()
        self.agent_match = AgentMatchCount(agent_match) if agent_match is not None else None
        """Which calls train, and the tally of the calls judged (``None``: every call trains)."""
        self.disagreements = 0
        """Client-traced policy replies (with token ids) that match no endpoint record, so far."""
        self.ambiguous_choices = 0
        """Requests with ``n > 1`` whose kept choice could not be known (none of their choices trained), so far."""
        self.unkept_choices = 0
        """Choices of ``n > 1`` requests the agent did not continue (never trained), so far."""
        self.unattributed_rewards = 0
        """Rewards with no trained completion before them, so far (kept in the return: see ``match_rewards``)."""
        self._counts = RewardCounts()

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
        if self.agent_match is not None:
            completions = self.agent_match.trained(completions, spans)
        attribution = match_rewards(spans, completions)
        rewards = attribution.rewards
        self._counts.add(attribution, order_unknown=_order_unknown(spans))
        unattributed = attribution.before_first_call + attribution.without_call
        if unattributed:
            self.unattributed_rewards += unattributed
            logger.warning(
                "rollout %s: %d reward(s) emitted before any trained completion ended%s",
                spans[0].rollout_id if spans else "?",
                unattributed,
                " (kept in the return, on the first trained completion)" if completions else "",
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

    def take_metrics(self) -> dict[str, float]:
        """``rewards/n_*`` (how rewards were placed) and ``agent_match/calls_*`` (with ``agent_match``) since the
        last call; warns when ``agent_match`` trained no call."""
        counts, self._counts = self._counts, RewardCounts()
        matched = self.agent_match.take_metrics() if self.agent_match is not None else {}
        return {**counts.metrics(), **matched}

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


def match_rewards(spans: Sequence[Span], completions: Sequence[Span]) -> RewardAttribution:
    """The reward each trained completion earned, placed by store sequence ids (``domain.reward_order``).

    A completion record is numbered once sampled, before the agent gets the reply; a reward span is
    numbered when emitted (both runners this project supports: the concurrent runner numbers it then,
    Agent-lightning's stores each span as it ends), or at the rollout's end when the agent returned it.
    """
    ids = {s.span_id for s in completions}
    calls = [
        NumberedCall(key=c.span_id, sequence_id=c.sequence_id, choice=_choice(c.attributes.get(CHOICE)))
        for c in completions
    ]
    rewards = [
        NumberedReward(sequence_id=span.sequence_id, value=value)
        for span in spans
        if span.span_id not in ids and (value := get_reward_value(span)) is not None
    ]
    return attribute_rewards(calls, rewards)


def _choice(value: object) -> int:
    return value if isinstance(value, int) else 0


def _order_unknown(spans: Sequence[Span]) -> int:
    return sum(1 for s in spans if s.attributes.get(REWARD_ORDER_UNKNOWN) is True and get_reward_value(s) is not None)


class RewardCounts:
    """How rewards were placed since the metrics were last taken."""

    def __init__(self) -> None:
        self.before_first_call = self.without_call = self.order_unknown = 0

    def add(self, attribution: RewardAttribution, *, order_unknown: int) -> None:
        self.before_first_call += attribution.before_first_call
        self.without_call += attribution.without_call
        self.order_unknown += order_unknown

    def metrics(self) -> dict[str, float]:
        return {
            "rewards/n_before_first_call": float(self.before_first_call),
            "rewards/n_without_trained_call": float(self.without_call),
            "rewards/n_order_unknown": float(self.order_unknown),
        }


class AgentMatchCount:
    """Judges each served call under ``pattern`` (``domain.agent_match``) and tallies the verdicts until taken."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regex = re.compile(pattern)
        self.calls = AgentCalls()
        """Calls judged since the last ``take_metrics``."""

    def judge(self, agents: Sequence[str]) -> CallVerdict:
        verdict = judge(agents, self._regex)
        self.calls = self.calls.add(agents, verdict)
        return verdict

    def trained(self, completions: Sequence[Span], spans: Sequence[Span]) -> list[Span]:
        """The completion records made by a matching agent, in their order."""
        trace = [t for s in spans if s.name != COMPLETION_SPAN and (t := trace_span(s)) is not None]
        kept: list[Span] = []
        for record in completions:
            agents = call_agents(policy_call(record), trace)
            if self.judge(agents) is CallVerdict.TRAINED:
                kept.append(record)
            else:
                logger.debug("rollout %s: call %d by %s not trained", record.rollout_id, record.sequence_id, agents)
        return kept

    def take_metrics(self) -> dict[str, float]:
        calls, self.calls = self.calls, AgentCalls()
        if calls.n_calls == 0:
            return {}
        unmatched = calls.describe_no_match(self.pattern, " in this batch")
        if unmatched is not None:
            logger.warning("%s", unmatched)
        return calls.metrics()


def policy_call(record: Span) -> PolicyCall:
    response_id = record.attributes.get(RESPONSE_ID)
    return PolicyCall(
        start=_time(record.start_time),
        end=_time(record.end_time),
        response_id=response_id if isinstance(response_id, str) else None,
    )


def trace_span(span: Span) -> TraceSpan | None:
    """What ``domain.agent_match`` reads of a traced span; ``None`` for one without both times."""
    if span.start_time is None or span.end_time is None:
        return None
    response_id = next((v for key in CLIENT_RESPONSE_ID if isinstance(v := span.attributes.get(key), str)), None)
    agent = TraceTree(span.span_id, span, []).agent_name()
    return TraceSpan(
        span_id=span.span_id,
        parent_id=span.parent_id,
        start=span.start_time,
        end=span.end_time,
        agent=str(agent) if agent is not None else None,
        response_id=response_id,
    )
