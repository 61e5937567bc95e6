"""``agent_match``: only the calls of matching agents train, the others are counted (``examples/langgraph_roles``).

The writer/checker LangGraph graph talks to the real policy endpoint over a scripted sampler (the writer
answers "3", the checker sends it back, the writer answers "7", the checker approves; reward 1.0), run by
the concurrent runner (its own LangChain spans) and by Agent-lightning's stock runner (AgentOps's handler);
the trajectories are rebuilt the way training rebuilds them, from the endpoint's records and from the
client's own spans. Then the example trains two batches on the tiny model with ``agent_match=writer``, from
either trajectory source, as ``agl-tinker train`` runs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypedDict

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent
from agentlightning.tracer.base import Tracer
from tinker_cookbook import renderers

from adapters.agl.client_triplets import PolicyCallsOnly
from adapters.agl.store import AglTripletSource
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.langchain.tracing import instrument_langchain
from adapters.runner.concurrent_runner import ConcurrentTracer, shared_tracer
from adapters.runner.processes import RunnerProcesses, run_concurrent_runner
from domain.trajectory import ReconstructedTrajectory, reconstruct_trajectory
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import enqueue, trajectory, wait_succeeded
from tests.support.runs import batch_lines, example_overrides
from tests.support.samplers import PromptSampler
from tests.support.stores import served_store
from tests.support.trajectories import assert_extends, assert_one_datum_each

pytestmark = pytest.mark.slow

langgraph = pytest.importorskip("langgraph", reason="pip install -c constraints.txt -e '.[langgraph]'")

TASK = {"word": "seven", "digit": "7"}
RUNNER_TRACES_LANGCHAIN = ConcurrentTracer.get_langchain_handler is not Tracer.get_langchain_handler
"""Whether the concurrent runner's tracer offers its LangChain handler itself (``adapters.langchain.tracing``)."""


class Question(TypedDict, total=False):
    q: str
    a: str


def replies(prompt: str) -> list[str]:
    if "A student was asked" in prompt:  # the checker
        return ["OK"] if "answered: '7'" in prompt else ["No, it is 7."]
    return ["7"] if "A reviewer says" in prompt else ["3"]


@pytest.fixture
async def sampler(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PromptSampler]:
    sampler = PromptSampler(renderer, replies)
    async with policy_endpoint(store, renderer, max_tokens=32, sampler=sampler):
        yield sampler


@pytest.fixture
def runner_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The concurrent runner's tracer with its LangChain handler on every run, as the runner sets it up."""
    if RUNNER_TRACES_LANGCHAIN:
        return
    handler = instrument_langchain(shared_tracer()._get_tracer_provider())
    monkeypatch.setattr(ConcurrentTracer, "get_langchain_handler", lambda self: handler, raising=False)


async def run_concurrently(store: agl.LightningStore, agent: agl.LitAgent[Any], tasks: Sequence[Any]) -> list[str]:
    stop = ThreadingEvent()
    runner = asyncio.create_task(run_concurrent_runner(agent, store, stop, concurrency=8, poll_interval_s=0.02))
    try:
        ids = await enqueue(store, tasks)
        await wait_succeeded(store, ids)
        return ids
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)


async def run_in_stock_runner(store: agl.InMemoryLightningStore, agent: str, tasks: Sequence[Any]) -> list[str]:
    """``tasks`` rolled out by one process running Agent-lightning's ``LitAgentRunner`` and ``AgentOpsTracer``."""
    async with served_store(store) as server:
        with RunnerProcesses(agent, server.endpoint, 1, concurrency=None):
            ids = await enqueue(store, tasks)
            await wait_succeeded(store, ids)
    return ids


def writer_only(result: ReconstructedTrajectory, sampler: PromptSampler) -> None:
    """The writer's two turns, exact, the second extending the first; the reward on the last."""
    assert [t.ac for t in result.transitions] == [sampler.tokens("3"), sampler.tokens("7")]
    assert [t.reward for t in result.transitions] == [0.0, 1.0]
    assert_extends(result)


def matched(metrics: dict[str, float]) -> dict[str, float]:
    """The ``agent_match/*`` counts of a source's metrics (the endpoint's also say how rewards were placed)."""
    return {k: v for k, v in metrics.items() if k.startswith("agent_match/")}


def counted(trained: int, others: int) -> dict[str, float]:
    return {
        "agent_match/calls_trained": float(trained),
        "agent_match/calls_other_agents": float(others),
        "agent_match/calls_ambiguous_agent": 0.0,
        "agent_match/calls_outside_agents": 0.0,
    }


async def test_only_the_writers_calls_are_trained_and_the_checkers_are_counted(
    store: agl.InMemoryLightningStore, sampler: PromptSampler, runner_langchain: None
) -> None:
    from examples.langgraph_roles.agent import WriterChecker

    ids = await run_concurrently(store, WriterChecker(), [TASK] * 3)

    adapter = EndpointTraceToTriplet(agent_match="writer")
    results = [await trajectory(store, rollout_id, adapter) for rollout_id in ids]
    for result in results:
        writer_only(result, sampler)
    assert matched(adapter.take_metrics()) == counted(2 * len(ids), 2 * len(ids))
    assert matched(adapter.take_metrics()) == {}  # taken
    await assert_one_datum_each(results)
    everything = await trajectory(store, ids[0])
    assert len(everything.transitions) == 4  # without agent_match the checker's calls train too


async def test_an_agl_rollout_graph_that_passes_no_callback_is_traced_by_the_concurrent_runner(
    store: agl.InMemoryLightningStore, sampler: PromptSampler, runner_langchain: None
) -> None:
    from tests.integration.langgraph_agents import roles_rollout

    ids = await run_concurrently(store, roles_rollout, [TASK] * 2)

    adapter = EndpointTraceToTriplet(agent_match="^writer$")
    for rollout_id in ids:
        writer_only(await trajectory(store, rollout_id, adapter), sampler)
    assert matched(adapter.take_metrics()) == counted(4, 4)


async def test_a_regex_that_matches_no_agent_trains_nothing_and_names_the_agents_it_saw(
    store: agl.InMemoryLightningStore, sampler: PromptSampler, runner_langchain: None, caplog: pytest.LogCaptureFixture
) -> None:
    from examples.langgraph_roles.agent import WriterChecker

    ids = await run_concurrently(store, WriterChecker(), [TASK])
    adapter = EndpointTraceToTriplet(agent_match="planner")

    assert (await trajectory(store, ids[0], adapter)).is_empty
    with caplog.at_level(logging.WARNING, logger="adapters.endpoint.triplets"):
        assert adapter.take_metrics()["agent_match/calls_other_agents"] == 4.0
    assert caplog.messages[-1] == (
        "agent_match='planner' matched none of 4 policy call(s) in this batch; agents seen: checker (2), writer (2)"
    )
    assert "1 reward(s) emitted before any trained completion ended" in caplog.messages[0]  # counted, not lost


async def test_under_agent_lightnings_runner_either_source_trains_only_the_writers_calls(
    store: agl.InMemoryLightningStore, sampler: PromptSampler
) -> None:
    """Agent-lightning's runner and tracer, AgentOps's LangChain handler: the endpoint's records (what
    ``agl.Trainer`` with this project's algorithm reads) and the client's own ``openai`` spans."""
    ids = await run_in_stock_runner(store, "examples.langgraph_roles.agent:WriterChecker", [TASK] * 2)

    endpoint_source = EndpointTraceToTriplet(agent_match="writer")
    for rollout_id in ids:
        writer_only(await trajectory(store, rollout_id, endpoint_source), sampler)
    assert matched(endpoint_source.take_metrics()) == counted(4, 4)
    for adapter in [
        PolicyCallsOnly(agl.TracerTraceToTriplet(), "policy", agent_match="writer"),
        PolicyCallsOnly(agl.TracerTraceToTriplet(agent_match="writer"), "policy"),  # agl.Trainer(adapter=...)'s
    ]:
        for rollout_id in ids:
            spans = list(await store.query_spans(rollout_id, "latest"))
            writer_only(reconstruct_trajectory(AglTripletSource(adapter).adapt(spans)), sampler)
        assert matched(adapter.take_metrics()) == counted(4, 4)


@pytest.mark.parametrize("source", ["endpoint", "client"])
async def test_the_example_trains_two_batches_with_agent_match(tmp_path: Path, tiny_model: Path, source: str) -> None:
    if source == "endpoint" and not RUNNER_TRACES_LANGCHAIN:
        pytest.skip("the concurrent runner does not trace LangChain runs yet (adapters.langchain.tracing)")
    from app.config import load_config
    from app.launch import train

    overrides = example_overrides(tmp_path, tiny_model, "langgraph_roles", "WriterChecker")
    cfg = load_config(None, [*overrides, "agent_match=writer", f"trajectory_source={source}"]).unwrap()

    summary = await asyncio.wait_for(train(cfg), 240)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in lines)  # junk replies crash no agent
    for m in lines:  # each rollout: the writer once or twice, the checker after each of its answers
        assert m["agent_match/calls_trained"] >= 4
        assert m["agent_match/calls_other_agents"] == m["agent_match/calls_trained"]
        assert m["agent_match/calls_outside_agents"] == 0


def test_trained_agents_stands_for_agent_match_unless_the_config_sets_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from app.config import load_config
    from app.launch import check_runner_agent, with_trained_agents

    base = [f"log_path={tmp_path}", "agent=tests.integration.langgraph_agents:trained_writer", "n_runners=1"]
    config = load_config(None, base).unwrap()
    trained = check_runner_agent(config)  # loads the agent here; in runner_python's environment, the probe reports it
    assert trained == "writer"

    assert with_trained_agents(config, trained).agent_match == "writer"
    with caplog.at_level(logging.WARNING, logger="app.launch"):
        overridden = load_config(None, [*base, "agent_match=checker"]).unwrap()
        assert with_trained_agents(overridden, trained).agent_match == "checker"
    assert caplog.messages == ["agent_match='checker' of the config wins over the agent's trained_agents='writer'"]
    assert with_trained_agents(config, None).agent_match is None


def test_prompt_model_and_parser_inside_a_node_belong_to_the_node() -> None:
    """The handler's spans: one agent span per node (and the graph), each model call's span under its node."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langgraph.graph import END, START, StateGraph
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from adapters.langchain.spans import AGENT_NAME, CHAIN_SPAN, CHAT_MODEL_SPAN, AgentSpans

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handler = AgentSpans(provider)
    chain = ChatPromptTemplate.from_messages([("user", "{q}")]) | FakeListChatModel(responses=["7"]) | StrOutputParser()

    def writer(state: Question) -> Question:
        return {"a": chain.invoke({"q": state["q"]})}

    graph = StateGraph(Question)
    graph.add_node("writer", writer)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", END)
    graph.compile(name="team").invoke({"q": "seven?"}, {"callbacks": [handler]})

    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != CHAIN_SPAN}
    agents = {s.attributes[AGENT_NAME]: s for s in exporter.get_finished_spans() if s.name == CHAIN_SPAN}
    assert set(agents) == {"team", "writer"}
    model = spans[CHAT_MODEL_SPAN]
    assert model.parent is not None and agents["writer"].context is not None
    assert model.parent.span_id == agents["writer"].context.span_id
    assert handler.open_runs == 0


def test_the_compat_config_passes_adapter_agent_match_through(tmp_path: Path) -> None:
    from adapters.cookbook.env import AGLDatasetBuilder
    from app.faces.agl_tinker_compat import Config

    builder: AGLDatasetBuilder[Any] = AGLDatasetBuilder(batch_size=2, train_dataset=["a", "b"], val_dataset=["c"])
    config = Config(
        learning_rate=1e-3,
        dataset_builder=builder,
        model_name="Qwen/Qwen3-0.6B",
        renderer_name="qwen3_instruct",
        log_path=str(tmp_path),
        adapter_agent_match="writer|reviser",
        backend="local",
    )

    assert config.agent_match == "writer|reviser"


def test_the_trainers_adapter_agent_match_is_used_unless_the_config_sets_one(caplog: pytest.LogCaptureFixture) -> None:
    from app.config import load_config
    from app.faces.agl_algorithm import with_adapter_agent_match

    plain, own = load_config().unwrap(), load_config(None, ["agent_match=checker"]).unwrap()
    adapter = agl.TracerTraceToTriplet(agent_match="writer")

    assert with_adapter_agent_match(plain, adapter).agent_match == "writer"
    assert with_adapter_agent_match(plain, agl.TracerTraceToTriplet()).agent_match is None
    with caplog.at_level(logging.WARNING, logger="app.faces.agl_algorithm"):
        assert with_adapter_agent_match(own, adapter).agent_match == "checker"
    assert caplog.messages == ["agent_match='checker' of the config wins over the trainer adapter's 'writer'"]
    with pytest.raises(ValueError, match="not a regular expression"):
        with_adapter_agent_match(plain, agl.TracerTraceToTriplet(agent_match="(writer"))
