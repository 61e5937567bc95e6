"""Which agent made a policy call, and whether it trains under ``agent_match`` (``domain.agent_match``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hypothesis import given
from hypothesis import strategies as st

from domain.agent_match import AgentCalls, CallVerdict, PolicyCall, TraceSpan, call_agents, judge

NAMES = st.sampled_from(["writer", "checker", "LangGraph", "planner"])


@dataclass(frozen=True)
class Placed:
    """A random trace of nested spans, a call inside one of them, and the agent that made it."""

    spans: list[TraceSpan]
    call: PolicyCall
    expected: tuple[str, ...]
    holder: TraceSpan
    """The innermost span around the call (an agent or not)."""


@st.composite
def trees(draw: st.DrawFn, depth: int = 3) -> list[tuple[TraceSpan, list[float]]]:
    """Spans nested by links and by time (siblings disjoint), each with the gaps between its children."""
    out: list[tuple[TraceSpan, list[float]]] = []
    counter = iter(range(10_000))

    def grow(parent: TraceSpan | None, start: float, end: float, level: int) -> None:
        span = TraceSpan(
            span_id=f"s{next(counter)}",
            parent_id=parent.span_id if parent else None,
            start=start,
            end=end,
            agent=draw(st.one_of(st.none(), NAMES)),
        )
        n = draw(st.integers(0, 2)) if level < depth else 0
        edges = [start + (end - start) * i / (2 * n + 1) for i in range(2 * n + 2)]
        gaps = [(edges[i] + edges[i + 1]) / 2 for i in range(0, 2 * n + 1, 2)]
        out.append((span, gaps))
        for k in range(n):
            grow(span, edges[2 * k + 1], edges[2 * k + 2], level + 1)

    grow(None, 0.0, 1000.0, 0)
    return out


@st.composite
def placed_calls(draw: st.DrawFn) -> Placed:
    tree = draw(trees())
    holder, gaps = draw(st.sampled_from(tree))
    middle = draw(st.sampled_from(gaps))
    call = PolicyCall(start=middle - 0.01, end=middle + 0.01)
    by_id = {s.span_id: s for s, _ in tree}
    node: TraceSpan | None = holder
    expected: tuple[str, ...] = ()
    while node is not None:
        if node.agent is not None:
            expected = (node.agent,)
            break
        node = by_id.get(node.parent_id) if node.parent_id else None
    spans = draw(st.permutations([s for s, _ in tree]))
    return Placed(list(spans), call, expected, holder)


@given(placed_calls())
def test_a_call_belongs_to_the_innermost_agent_around_it_in_time(placed: Placed) -> None:
    assert call_agents(placed.call, placed.spans) == placed.expected


@given(placed_calls(), st.floats(0, 5000, allow_nan=False))
def test_the_client_span_with_the_calls_response_id_names_its_agent_whatever_the_times(
    placed: Placed, skew: float
) -> None:
    """The exact relation: the span of the same reply, its nearest agent ancestor (clocks play no part)."""
    client = TraceSpan("client", placed.holder.span_id, skew, skew + 1, response_id="r1")
    shifted = skew * 3
    call = replace(placed.call, start=placed.call.start + shifted, end=placed.call.end + shifted, response_id="r1")

    agents = call_agents(call, [*placed.spans, client])

    if placed.expected:
        assert agents == placed.expected
    else:  # no agent among its ancestors: containment decides, and the call's times are elsewhere now
        assert agents == call_agents(replace(call, response_id=None), placed.spans)


def test_an_agent_span_that_is_the_llm_call_itself_does_not_count_for_the_exact_relation() -> None:
    writer = TraceSpan("w", None, 0, 10, agent="writer")
    client = TraceSpan("c", "w", 1, 2, agent="checker", response_id="r")

    assert call_agents(PolicyCall(1.1, 1.9, "r"), [writer, client]) == ("writer",)


def test_parallel_branches_both_around_a_call_are_both_its_agents() -> None:
    graph = TraceSpan("g", None, 0, 100, agent="LangGraph")
    writer = TraceSpan("w", "g", 10, 60, agent="writer")
    checker = TraceSpan("c", "g", 20, 70, agent="checker")

    agents = call_agents(PolicyCall(30, 40), [graph, writer, checker])

    assert agents == ("checker", "writer")
    assert judge(agents, re.compile("writer")) is CallVerdict.AMBIGUOUS
    assert judge(agents, re.compile("writer|checker")) is CallVerdict.TRAINED
    assert judge(agents, re.compile("planner")) is CallVerdict.OTHER_AGENT


def test_a_child_with_the_same_times_as_its_parent_is_the_inner_one() -> None:
    outer = TraceSpan("o", None, 0, 10, agent="team")
    inner = TraceSpan("i", "o", 0, 10, agent="writer")

    assert call_agents(PolicyCall(1, 2), [inner, outer]) == ("writer",)


def test_a_call_outside_every_agent_has_none() -> None:
    writer = TraceSpan("w", None, 0, 10, agent="writer")

    assert call_agents(PolicyCall(11, 12), [writer]) == ()
    assert call_agents(PolicyCall(5, 11), [writer]) == ()  # it outlasted the agent: not inside it
    assert judge((), re.compile(".*")) is CallVerdict.NO_AGENT


@given(st.lists(NAMES, min_size=1, max_size=3), st.sampled_from(["writer", "^w", "check|plan", "x"]))
def test_the_verdict_is_agent_lightnings_re_search_over_every_agent(agents: list[str], pattern: str) -> None:
    found = [re.search(pattern, a) is not None for a in agents]
    verdict = judge(agents, re.compile(pattern))

    assert (verdict is CallVerdict.TRAINED) == all(found)
    assert (verdict is CallVerdict.OTHER_AGENT) == (not any(found))


@given(st.lists(st.tuples(st.lists(NAMES, max_size=2), st.sampled_from(list(CallVerdict)))))
def test_the_tally_counts_every_call_once(calls: list[tuple[list[str], CallVerdict]]) -> None:
    tally = AgentCalls()
    for agents, verdict in calls:
        tally = tally.add(agents, verdict)

    metrics = tally.metrics()
    assert sum(metrics.values()) == len(calls) == tally.n_calls
    assert set(metrics) == {f"agent_match/calls_{v.value}" for v in CallVerdict}
    trained = any(v is CallVerdict.TRAINED for _, v in calls)
    assert (tally.describe_no_match("writer") is None) == (trained or not calls)


def test_a_batch_that_trained_nothing_names_the_regex_and_the_agents_seen() -> None:
    tally = AgentCalls().add(["checker"], CallVerdict.OTHER_AGENT).add(["checker"], CallVerdict.OTHER_AGENT)
    tally = tally.add([], CallVerdict.NO_AGENT)

    assert tally.describe_no_match("writ") == (
        "agent_match='writ' matched none of 3 policy call(s); agents seen: checker (2); 1 call(s) outside every agent"
    )


def test_a_bad_agent_match_is_one_error_line_at_load() -> None:
    from returns.result import Failure

    from app.config import load_config

    loaded = load_config(None, ["agent_match=[writer"])

    assert isinstance(loaded, Failure)
    assert str(loaded.failure()) == (
        "invalid config: agent_match: '[writer' is not a regular expression: unterminated character set at position 0"
    )
    assert load_config(None, ["agent_match=^writer$"]).unwrap().agent_match == "^writer$"
