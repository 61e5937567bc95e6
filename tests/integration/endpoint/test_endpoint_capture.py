"""Capture at the endpoint: whatever client an agent uses, the trajectory holds exactly what the
policy saw and sampled; multi-turn histories extend token for token; other LLMs are never trained.

Agents run in a real ``LitAgentRunner`` against the real ``LLMProxy`` endpoint, the store and the
tracer; a scripted sampler replies with non-canonical (character-level) tokens, so any
re-tokenisation of a reply would show.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import agentlightning as agl
import pytest
from tinker_cookbook import renderers

from adapters.agl.client_triplets import PolicyCallsOnly
from adapters.agl.store import AglTripletSource
from adapters.cookbook.rl_types import to_trajectory_group
from adapters.cookbook.training import CookbookTrainingData
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from domain.trajectory import reconstruct_trajectory
from ports.training_data import KLPenalty
from tests.integration import capture_agents
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import run, trajectory
from tests.support.samplers import CharSampler
from tests.support.vllm import VllmStyleServer

pytestmark = pytest.mark.slow

QUESTION = "Guess my number."


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=32) as ep:
        yield ep


@pytest.fixture(scope="module")
def helper_url() -> Iterator[str]:
    """An untrained helper/judge on a vLLM-style server: it returns token ids beyond the policy's vocabulary."""
    with VllmStyleServer("helper", "think of 4", [999_999, 999_998], ["x", "x"]).serving() as server:
        yield server.url


@pytest.mark.parametrize(
    "agent",
    [
        capture_agents.openai_async_agent,
        capture_agents.litellm_agent,
        capture_agents.streaming_agent,
        capture_agents.raw_http_agent,
    ],
    ids=["openai-async", "litellm", "openai-stream", "raw-http"],
)
async def test_any_client_yields_the_exact_prompt_sample_logprobs_and_reward(
    store: agl.InMemoryLightningStore,
    endpoint: PolicyEndpoint,
    renderer: renderers.Renderer,
    agent: agl.LitAgent[Any],
) -> None:
    sampler = CharSampler(renderer, ["I'm 42."])
    endpoint.set_sampler(sampler)

    (rollout_id,) = await run(store, agent, [{"question": QUESTION, "answer": "42"}])

    result = await trajectory(store, rollout_id)
    (transition,) = result.transitions
    assert not result.rejections
    assert transition.ob == sampler.prompts[0]
    assert transition.ob == tuple(renderer.build_generation_prompt([{"role": "user", "content": QUESTION}]).to_ints())
    assert transition.ac == sampler.outputs[0].tokens
    assert transition.logprobs == sampler.outputs[0].logprobs
    assert transition.reward == 1.0


async def test_a_multi_turn_history_extends_token_for_token_and_merges_into_one_datum(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    sampler = CharSampler(renderer, ["I'm 3.", "I'm 5.", "I'm 42."])
    canonical = renderer.tokenizer.encode("I'm 3.", add_special_tokens=False)
    assert tuple(canonical) != sampler.replies[0][:-1], "the sampler must not produce canonical tokens"
    endpoint.set_sampler(sampler)

    ids = await run(store, capture_agents.multi_turn_agent, [{"question": QUESTION, "answer": "42"}] * 2)

    for rollout_id in ids:
        result = await trajectory(store, rollout_id)
        assert len(result.transitions) == 3 and not result.rejections
        for before, after in zip(result.transitions, result.transitions[1:], strict=False):
            assert after.ob[: len(before.ob) + len(before.ac)] == before.ob + before.ac
        assert [t.reward for t in result.transitions] == [0.0, 0.0, 1.0]
    assert endpoint.take_metrics() == {
        "endpoint/prefix/first_turn": 2.0,
        "endpoint/prefix/extended": 4.0,
        "endpoint/capture/recorded": 6.0,
    }

    # The cookbook merges each trajectory's three turns into one datum.
    trajectories = [await trajectory(store, rollout_id) for rollout_id in ids]
    group = to_trajectory_group(trajectories, [0.0, 0.0], [{}, {}], {})
    data_D, _ = await CookbookTrainingData().rl_data([group], KLPenalty(), None)
    assert len(data_D) == 2


async def test_an_edited_history_is_rendered_from_text_and_counted(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    sampler = CharSampler(renderer, ["I'm 3."])
    endpoint.set_sampler(sampler)

    @agl.rollout
    async def editing_agent(task: dict[str, Any], llm: agl.LLM) -> float:
        import openai

        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
        messages: list[Any] = [{"role": "user", "content": QUESTION}]
        reply = await client.chat.completions.create(model=llm.model, messages=messages)
        edited = (reply.choices[0].message.content or "") + " (edited)"
        messages += [{"role": "assistant", "content": edited}, {"role": "user", "content": "Again."}]
        await client.chat.completions.create(model=llm.model, messages=messages)
        return 0.0

    (rollout_id,) = await run(store, editing_agent, [{"question": QUESTION}])

    result = await trajectory(store, rollout_id)
    assert len(result.transitions) == 2
    second_prompt = renderer.build_generation_prompt(
        [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "I'm 3. (edited)"},
            {"role": "user", "content": "Again."},
        ]
    ).to_ints()
    assert result.transitions[1].ob == tuple(second_prompt)
    assert endpoint.take_metrics()["endpoint/prefix/broken/history_edited"] == 1.0


async def test_helper_and_judge_calls_to_another_llm_are_never_trained(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer, helper_url: str
) -> None:
    sampler = CharSampler(renderer, ["I'm 42."])
    endpoint.set_sampler(sampler)

    (rollout_id,) = await run(
        store, capture_agents.helper_agent, [{"question": QUESTION, "answer": "42", "helper_url": helper_url}]
    )

    result = await trajectory(store, rollout_id)
    (transition,) = result.transitions
    assert transition.ac == sampler.outputs[0].tokens
    assert transition.reward == 1.0
    vocab = len(renderer.tokenizer)
    assert all(t < vocab for t in transition.ob + transition.ac)


async def test_the_client_side_source_keeps_only_the_policys_calls_and_rejects_foreign_ids(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer, helper_url: str
) -> None:
    """Seed compatibility: ``TracerTraceToTriplet`` over the client's spans, restricted to the policy."""
    sampler = CharSampler(renderer, ["I'm 42."])
    endpoint.set_sampler(sampler)
    (rollout_id,) = await run(
        store, capture_agents.helper_agent, [{"question": QUESTION, "answer": "42", "helper_url": helper_url}]
    )
    spans = list(await store.query_spans(rollout_id, "latest"))

    everything = AglTripletSource(agl.TracerTraceToTriplet()).adapt(spans)
    assert len(everything) > 1, "the stock adapter turns the helper's calls into triplets too"
    vocab = len(renderer.tokenizer)
    unfiltered = reconstruct_trajectory(everything, vocab_size=vocab)
    assert [r.reason.value for r in unfiltered.rejections] == ["token_out_of_vocab"] * (len(everything) - 1)

    result = reconstruct_trajectory(
        AglTripletSource(PolicyCallsOnly(agl.TracerTraceToTriplet(), "policy")).adapt(spans), vocab_size=vocab
    )
    (transition,) = result.transitions
    assert not result.rejections
    assert transition.ac == sampler.outputs[0].tokens
    assert transition.reward == 1.0


async def test_a_client_traced_reply_that_no_record_matches_is_counted(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    sampler = CharSampler(renderer, ["I'm 42."])
    endpoint.set_sampler(sampler)
    (rollout_id,) = await run(store, capture_agents.openai_async_agent, [{"question": QUESTION, "answer": "42"}])
    spans = list(await store.query_spans(rollout_id, "latest"))
    adapter = EndpointTraceToTriplet()

    adapter.adapt(spans)
    assert adapter.disagreements == 0, "the openai client's own span carries the same ids as the record"
    forged = agl.Span.from_attributes(
        attributes={"response_token_ids": [1, 2, 3]}, rollout_id=rollout_id, name="openai.chat.completion"
    )
    adapter.adapt([*spans, forged])
    assert adapter.disagreements == 1
