"""Which policy calls train under ``agent_match``: the agent that made each call, and the verdict on it.

Agent-lightning's ``TracerTraceToTriplet(agent_match=REGEX)`` trains only the LLM calls made inside an agent
whose name the regex finds (``re.search``); the agent of a call is the *innermost* agent span around it (an
agent nested in a matching one, whose name does not match, takes its calls out). Here the same rule is
applied to calls known by their time interval and, where the agent's client traced the call too, by the
response id that the client-side span and the endpoint's record share:

1. **Exact**: a traced span carrying the call's response id (an ``openai.chat.completion`` span, a LangChain
   chat-model span). The call's agent is the nearest agent among that span's ancestors (``parent_id`` links,
   the span itself excluded).
2. **Containment**, when no traced span carries the id or its ancestors hold no agent: the agent spans whose
   ``[start, end]`` holds the call's ``[start, end]``, innermost first: a candidate is dropped when another
   candidate lies inside it (a descendant by ``parent_id`` links, or by time: strictly within it). What is
   left are the call's agents; there are several only when candidates overlap without nesting (parallel
   branches with the call inside both).

The verdict: ``TRAINED`` when every agent of the call matches, ``OTHER_AGENT`` when none does, ``AMBIGUOUS``
when they disagree (not trained: which branch made the call cannot be told), ``NO_AGENT`` when the call was
made outside every agent (not trained, as in Agent-lightning). The clocks of the runner (agent spans) and the
endpoint (records) are compared directly, as for rewards: on one machine they are the same clock.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class TraceSpan:
    """What the rule reads of one span of a rollout's trace."""

    span_id: str
    parent_id: str | None
    start: float
    end: float
    agent: str | None = None
    """The name of the agent this span stands for; ``None`` when it is not an agent's span."""
    response_id: str | None = None
    """The response id of the LLM call this span traced (client side); ``None`` when it traced none."""


@dataclass(frozen=True, slots=True)
class PolicyCall:
    """One call the policy endpoint served: when it ran and the response id it answered with."""

    start: float
    end: float
    response_id: str | None = None


class CallVerdict(StrEnum):
    """Whether a policy call trains under ``agent_match``, and why not."""

    TRAINED = "trained"
    OTHER_AGENT = "other_agents"
    AMBIGUOUS = "ambiguous_agent"
    NO_AGENT = "outside_agents"


def call_agents(call: PolicyCall, spans: Sequence[TraceSpan]) -> tuple[str, ...]:
    """The names of the innermost agents that made ``call`` (sorted, distinct); ``()`` outside every agent."""
    by_id = {s.span_id: s for s in spans}
    if call.response_id:
        traced = [s for s in spans if s.response_id == call.response_id]
        exact = sorted({name for s in traced if (name := _nearest_agent(s, by_id)) is not None})
        if exact:
            return tuple(exact)
    candidates = [s for s in spans if s.agent is not None and s.start <= call.start and call.end <= s.end]
    innermost = [c for c in candidates if not any(_inside(d, c, by_id) for d in candidates if d is not c)]
    return tuple(sorted({c.agent for c in innermost if c.agent is not None}))


def _ancestors(span: TraceSpan, by_id: Mapping[str, TraceSpan]) -> Iterable[TraceSpan]:
    seen = {span.span_id}
    parent = by_id.get(span.parent_id) if span.parent_id is not None else None
    while parent is not None and parent.span_id not in seen:
        yield parent
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_id) if parent.parent_id is not None else None


def _nearest_agent(span: TraceSpan, by_id: Mapping[str, TraceSpan]) -> str | None:
    return next((a.agent for a in _ancestors(span, by_id) if a.agent is not None), None)


def _inside(inner: TraceSpan, outer: TraceSpan, by_id: Mapping[str, TraceSpan]) -> bool:
    """Whether ``inner`` lies inside ``outer``: its descendant by links, else strictly within it in time."""
    if any(a.span_id == outer.span_id for a in _ancestors(inner, by_id)):
        return True
    if any(a.span_id == inner.span_id for a in _ancestors(outer, by_id)):
        return False
    within = outer.start <= inner.start and inner.end <= outer.end
    return within and (outer.start, outer.end) != (inner.start, inner.end)


def judge(agents: Sequence[str], pattern: re.Pattern[str]) -> CallVerdict:
    """The verdict on a call made by ``agents`` (``call_agents``) under ``pattern``."""
    if not agents:
        return CallVerdict.NO_AGENT
    matches = [pattern.search(agent) is not None for agent in agents]
    if all(matches):
        return CallVerdict.TRAINED
    return CallVerdict.OTHER_AGENT if not any(matches) else CallVerdict.AMBIGUOUS


@dataclass(frozen=True, slots=True)
class AgentCalls:
    """Policy calls judged under ``agent_match`` since some point: verdicts, and the agents that made them."""

    verdicts: Mapping[CallVerdict, int] = field(default_factory=dict)
    agents: Mapping[str, int] = field(default_factory=dict)
    """Calls per agent name (a call with several agents counts for each)."""

    def add(self, agents: Sequence[str], verdict: CallVerdict) -> AgentCalls:
        verdicts, names = Counter(self.verdicts), Counter(self.agents)
        verdicts[verdict] += 1
        names.update(set(agents))
        return AgentCalls(dict(verdicts), dict(names))

    @property
    def n_calls(self) -> int:
        return sum(self.verdicts.values())

    def metrics(self) -> dict[str, float]:
        """``agent_match/calls_<verdict>`` for every verdict (zeros included)."""
        return {f"agent_match/calls_{v.value}": float(self.verdicts.get(v, 0)) for v in CallVerdict}

    def describe_no_match(self, pattern: str, where: str = "") -> str | None:
        """One line when calls were made and ``pattern`` trained none of them (``where``: e.g. " in this batch");
        ``None`` otherwise."""
        if self.n_calls == 0 or self.verdicts.get(CallVerdict.TRAINED, 0) > 0:
            return None
        seen = ", ".join(f"{name} ({n})" for name, n in sorted(self.agents.items(), key=lambda kv: (-kv[1], kv[0])))
        outside = self.verdicts.get(CallVerdict.NO_AGENT, 0)
        parts = [f"agents seen: {seen or 'none'}"]
        if outside:
            parts.append(f"{outside} call(s) outside every agent")
        return f"agent_match={pattern!r} matched none of {self.n_calls} policy call(s){where}; " + "; ".join(parts)
