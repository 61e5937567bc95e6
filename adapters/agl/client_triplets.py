"""The client-side trajectory source, kept for seed compatibility, restricted to the policy's calls.

``TracerTraceToTriplet`` turns every traced OpenAI call that carries token ids into a triplet,
including an agent's calls to helper or judge models on other servers. ``PolicyCallsOnly`` drops
the LLM-call spans whose requested model is not the policy's before the inner adapter runs; ids
beyond the policy's vocabulary are rejected later, in reconstruction (``vocab_size``).

With ``agent_match`` it also drops the policy calls not made by a matching agent, by the rule the
endpoint source uses (``domain.agent_match``: the nearest agent among the call span's ancestors, else
the innermost agent spans around it in time), and counts them (``agent_match/calls_*``); the inner
adapter then gives each reward to the latest kept call before it, as Agent-lightning does with its own
``agent_match``. Agent-lightning's own filter (``TracerTraceToTriplet(agent_match=...)``) is not used: under
AgentOps's LangChain handler, an async LangGraph node's ``openai.chat.completion`` spans hang under the
handler's session span, which never ends and is never stored, so its span tree puts no agent above them and
it trains none of them (measured with LangGraph 1.2); the time relation still finds their node.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence

from agentlightning import Span, TracerTraceToTriplet, TraceToTripletBase, Triplet

from adapters.endpoint.triplets import AgentMatchCount, trace_span
from domain.agent_match import CallVerdict, PolicyCall, call_agents

REQUEST_MODEL = "gen_ai.request.model"
LLM_CALL = re.compile(r"openai\.chat\.completion")


class PolicyCallsOnly(TraceToTripletBase):
    """Wraps a span adapter so that only calls to ``model_name`` (and, with ``agent_match``, by a matching agent)
    become triplets.

    Without ``agent_match``, an inner ``TracerTraceToTriplet``'s own ``agent_match`` is the one applied (here, by
    the rule above; the inner adapter then runs without it).
    """

    def __init__(self, inner: TraceToTripletBase, model_name: str, agent_match: str | None = None) -> None:
        super().__init__()
        if isinstance(inner, TracerTraceToTriplet) and inner.agent_match is not None:
            agent_match = agent_match if agent_match is not None else inner.agent_match
            inner = copy.copy(inner)  # the caller's adapter is left as it is
            inner.agent_match = None
        self.inner = inner
        self.model_name = model_name
        self.agent_match = AgentMatchCount(agent_match) if agent_match is not None else None

    def adapt(self, source: Sequence[Span], /) -> list[Triplet]:
        spans = [span for span in source if not self._foreign_call(span)]
        if self.agent_match is not None:
            spans = self._matching_calls_only(self.agent_match, spans)
        return list(self.inner.adapt(spans)) if spans else []

    def take_metrics(self) -> dict[str, float]:
        """``agent_match/calls_*`` since the last call (none without ``agent_match``); warns when it trained none."""
        return self.agent_match.take_metrics() if self.agent_match is not None else {}

    def _foreign_call(self, span: Span) -> bool:
        if not LLM_CALL.search(span.name):
            return False
        model = span.attributes.get(REQUEST_MODEL)
        return isinstance(model, str) and model.removeprefix("openai/") != self.model_name

    def _matching_calls_only(self, count: AgentMatchCount, spans: list[Span]) -> list[Span]:
        """``spans`` without the LLM-call spans of agents ``count`` does not match (each response judged once)."""
        trace = [t for s in spans if (t := trace_span(s)) is not None]
        by_id = {t.span_id: t for t in trace}
        verdicts: dict[str, CallVerdict] = {}
        dropped: set[str] = set()
        for span in spans:
            traced = by_id.get(span.span_id)
            if not LLM_CALL.search(span.name) or traced is None:
                continue
            key = traced.response_id or span.span_id
            if key not in verdicts:
                call = PolicyCall(traced.start, traced.end, traced.response_id)
                verdicts[key] = count.judge(call_agents(call, trace))
            if verdicts[key] is not CallVerdict.TRAINED:
                dropped.add(span.span_id)
        return [span for span in spans if span.span_id not in dropped]
