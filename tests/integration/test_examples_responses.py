"""The Responses API examples through the real path (endpoint over a scripted sampler, a real runner, the
store, ``EndpointTraceToTriplet``, the cookbook's datums), then each trained for two batches on the tiny model.

The OpenAI Agents SDK is not in the project's lock; its tests skip, saying so, where ``agents`` is not
importable (install: ``pip install --no-deps openai-agents==0.24.0 griffelib``).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path

import agentlightning as agl
import pytest
from tinker_cookbook import renderers

from adapters.endpoint.capture import COMPLETION_SPAN, PREFIX
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import run, trajectory
from tests.support.runs import batch_lines, example_overrides
from tests.support.samplers import TOOL_CALL, CharSampler
from tests.support.trajectories import assert_exact, assert_extends, assert_one_datum_each

pytestmark = pytest.mark.slow


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=64) as ep:
        yield ep


needs_agents_sdk = pytest.mark.skipif(
    importlib.util.find_spec("agents") is None,
    reason="openai-agents is not installed: scripts/bootstrap.sh installs it (the project's `agents` extra)",
)


async def test_a_responses_api_game_over_three_turns_trains_as_one_datum_per_game(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    from examples.responses.agent import guess_number_responses

    task = {"secret": 7, "low": 1, "high": 10, "max_turns": 3}
    sampler = CharSampler(renderer, ["3", "9", "7"])
    endpoint.set_sampler(sampler)

    ids = await run(store, guess_number_responses, [task, task])

    results = [await trajectory(store, rollout_id) for rollout_id in ids]
    for i, (rollout_id, result) in enumerate(zip(ids, results, strict=True)):
        assert_exact(result, sampler, slice(3 * i, 3 * i + 3))
        assert_extends(result)
        assert [t.reward for t in result.transitions] == [0.0, 0.0, pytest.approx(0.6)]
        spans = sorted(
            (s for s in await store.query_spans(rollout_id, "latest") if s.name == COMPLETION_SPAN),
            key=lambda s: s.sequence_id,
        )
        assert [s.attributes[PREFIX] for s in spans] == ["first_turn", "extended", "extended"]
    await assert_one_datum_each(results)


@needs_agents_sdk
async def test_an_agents_sdk_run_with_a_tool_call_trains_as_one_datum(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    from examples.agents_sdk.agent import agents_sdk_calculator

    sampler = CharSampler(renderer, [TOOL_CALL, "The answer is 5."])
    endpoint.set_sampler(sampler)

    (rollout_id,) = await run(store, agents_sdk_calculator, [{"question": "What is 2 + 3?", "answer": 5}])

    result = await trajectory(store, rollout_id)
    assert_exact(result, sampler)
    assert_extends(result)
    assert [t.reward for t in result.transitions] == [0.0, 1.0]
    t1, t2 = result.transitions
    added = renderer.tokenizer.decode(list(t2.ob[len(t1.ob) + len(t1.ac) :]))
    assert "<tool_response>\n5\n</tool_response>" in added  # the SDK ran add(2, 3) and sent "5" back
    assert endpoint.take_metrics()["endpoint/prefix/extended"] == 1.0
    await assert_one_datum_each([result])


@pytest.mark.parametrize(
    ("name", "agent"),
    [
        ("responses", "guess_number_responses"),
        pytest.param("agents_sdk", "agents_sdk_calculator", marks=needs_agents_sdk),
    ],
)
async def test_the_responses_examples_train_two_batches_on_the_tiny_model(
    tmp_path: Path, tiny_model: Path, name: str, agent: str
) -> None:
    from app.config import load_config
    from app.launch import train

    cfg = load_config(None, example_overrides(tmp_path, tiny_model, name, agent)).unwrap()

    summary = await asyncio.wait_for(train(cfg), 150)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    assert all(m["rollouts/n_enqueued"] == 4 for m in lines)
    assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in lines)
    assert all(m["rollouts/n_without_reward"] == 0 for m in lines)  # every trained rollout's reward came back
