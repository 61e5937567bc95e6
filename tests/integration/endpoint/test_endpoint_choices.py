"""What is trained of a rollout: kept choices only (``n > 1``), branches whatever order they finish in,
and rewards combined and counted, through the real endpoint, store, runner and cookbook datums."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import agentlightning as agl
import openai
import pytest
from tinker_cookbook import renderers

from adapters.cookbook.rl_types import to_trajectory_group
from adapters.cookbook.training import CookbookTrainingData
from adapters.endpoint.capture import CHOICE, COMPLETION_SPAN, EXTENDS, N_CHOICES, PREFIX, RESPONSE_IDS
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from domain.trajectory import ReconstructedTrajectory
from ports.training_data import KLPenalty
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import run, trajectory
from tests.support.samplers import PromptSampler

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "Pick a colour."}]


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=64) as ep:
        yield ep


async def rollout_client(store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint) -> tuple[str, openai.AsyncOpenAI]:
    attempted = await store.start_rollout(input={"question": "?"})
    resource = endpoint.as_resource()
    assert isinstance(resource, agl.ProxyLLM)
    base = resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id)
    return attempted.rollout_id, openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)


async def datums(result: ReconstructedTrajectory) -> list[tuple[int, ...]]:
    """The cookbook's datums of one trajectory, each as its full token sequence."""
    group = to_trajectory_group([result], [0.0], [{}], {})
    data_D, _ = await CookbookTrainingData().rl_data([group], KLPenalty(), None)
    return [(*d.model_input, d.target_tokens[-1]) for d in data_D]


def colours(prompt: str) -> list[str]:
    if "Why" in prompt:
        return ["Because."]
    return ["Red.", "Blue.", "Green."]


class TestChoices:
    async def test_every_choice_is_recorded_and_only_the_one_a_later_turn_continues_is_trained(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, colours)
        endpoint.set_sampler(sampler)
        rollout_id, client = await rollout_client(store, endpoint)

        first = await client.chat.completions.create(model="policy", messages=QUESTION, n=3)  # type: ignore[arg-type]
        kept = first.choices[1].message  # the agent keeps "Blue."
        history = [*QUESTION, {"role": "assistant", "content": kept.content}, {"role": "user", "content": "Why?"}]
        await client.chat.completions.create(model="policy", messages=history)  # type: ignore[arg-type]

        assert [c.message.content for c in first.choices] == ["Red.", "Blue.", "Green."]
        assert [(c.model_extra or {})["token_ids"] for c in first.choices] == [
            list(s.tokens) for s in sampler.outputs[0]
        ]
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        recorded = sorted((s.sequence_id, s.attributes[CHOICE], s.attributes[N_CHOICES]) for s in spans)
        seq_first = min(s.sequence_id for s in spans)
        seq_second = max(s.sequence_id for s in spans)
        assert recorded == [(seq_first, 0, 3), (seq_first, 1, 3), (seq_first, 2, 3), (seq_second, 0, 1)]
        (continuation,) = [s for s in spans if s.sequence_id == seq_second]
        assert list(continuation.attributes[EXTENDS]) == [seq_first, 1]
        assert continuation.attributes[PREFIX] == "extended"
        adapter = EndpointTraceToTriplet()
        result = await trajectory(store, rollout_id, adapter)
        blue, because = sampler.outputs[0][1], sampler.outputs[1][0]
        assert [t.ac for t in result.transitions] == [blue.tokens, because.tokens]
        assert [t.logprobs for t in result.transitions] == [blue.logprobs, because.logprobs]
        assert (
            result.transitions[1].ob[: len(sampler.prompts[0]) + len(blue.tokens)] == sampler.prompts[0] + blue.tokens
        )
        assert (adapter.unkept_choices, adapter.ambiguous_choices) == (2, 0)
        assert await datums(result) == [result.transitions[1].ob + because.tokens]

    async def test_a_last_turn_with_several_choices_is_not_trained_and_is_counted_as_ambiguous(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["Because."] if "Why" in p else ["Red."])
        endpoint.set_sampler(sampler)
        rollout_id, client = await rollout_client(store, endpoint)

        await client.chat.completions.create(model="policy", messages=QUESTION)  # type: ignore[arg-type]
        history = [*QUESTION, {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Why?"}]
        last = await client.chat.completions.create(model="policy", messages=history, n=2)  # type: ignore[arg-type]

        assert len(last.choices) == 2
        adapter = EndpointTraceToTriplet()
        result = await trajectory(store, rollout_id, adapter)
        assert [t.ac for t in result.transitions] == [sampler.outputs[0][0].tokens]  # only the single-choice turn
        assert adapter.ambiguous_choices == 1
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert len(spans) == 3  # both choices of the last turn are still recorded


class TestParallelCalls:
    @pytest.mark.parametrize("finish_first", ["A", "B"])
    async def test_branches_are_separate_datums_and_continuations_merge_into_their_branch_in_any_finish_order(
        self,
        store: agl.InMemoryLightningStore,
        endpoint: PolicyEndpoint,
        renderer: renderers.Renderer,
        finish_first: str,
    ) -> None:
        def replies(prompt: str) -> list[str]:
            if "Go on" in prompt:
                return ["A2." if "Branch A" in prompt else "B2."]
            return ["A1." if "Branch A" in prompt else "B1."]

        sampler = PromptSampler(renderer, replies)
        endpoint.set_sampler(sampler)
        rollout_id, client = await rollout_client(store, endpoint)
        (a_in, a_go), (b_in, b_go) = sampler.gate("A1."), sampler.gate("B1.")

        def ask(branch: str) -> Any:
            messages = [{"role": "user", "content": f"Branch {branch}"}]
            return asyncio.create_task(client.chat.completions.create(model="policy", messages=messages))  # type: ignore[arg-type]

        a, b = ask("A"), None
        await a_in.wait()
        b = ask("B")
        await b_in.wait()
        first_gate, second_gate = (a_go, b_go) if finish_first == "A" else (b_go, a_go)
        first_gate.set()
        await asyncio.sleep(0)
        await (a if finish_first == "A" else b)
        second_gate.set()
        replies_ab = [await a, await b]
        continued = []
        for branch, reply in zip("AB", replies_ab, strict=True):
            history = [
                {"role": "user", "content": f"Branch {branch}"},
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": "Go on"},
            ]
            continued.append(await client.chat.completions.create(model="policy", messages=history))  # type: ignore[arg-type]

        assert [r.choices[0].message.content for r in continued] == ["A2.", "B2."]
        result = await trajectory(store, rollout_id)
        texts = [renderer.tokenizer.decode(list(t.ac)) for t in result.transitions]
        # A call is numbered once answered, so the branch answered first is listed first.
        first, second = ("A", "B") if finish_first == "A" else ("B", "A")
        assert texts == [
            f"{first}1.<|im_end|>",
            f"{first}2.<|im_end|>",
            f"{second}1.<|im_end|>",
            f"{second}2.<|im_end|>",
        ]
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert sorted(str(s.attributes[PREFIX]) for s in spans) == ["extended", "extended", "first_turn", "first_turn"]
        a1, a2, b1, b2 = (
            result.transitions if finish_first == "A" else (*result.transitions[2:], *result.transitions[:2])
        )
        assert sorted(await datums(result)) == sorted([a2.ob + a2.ac, b2.ob + b2.ac])
        assert a2.ob[: len(a1.ob) + len(a1.ac)] == a1.ob + a1.ac
        assert b2.ob[: len(b1.ob) + len(b1.ac)] == b1.ob + b1.ac


@agl.rollout
async def two_rewards_after_one_call(task: dict[str, Any], llm: agl.LLM) -> None:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
    agl.emit_reward(0.25)
    agl.emit_reward(0.5)


@agl.rollout
async def reward_before_any_call(task: dict[str, Any], llm: agl.LLM) -> None:
    agl.emit_reward(0.125)
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
    agl.emit_reward(1.0)


class TestRewards:
    async def test_rewards_after_the_same_call_add_up(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(PromptSampler(renderer, lambda p: ["Red."]))

        (rollout_id,) = await run(store, two_rewards_after_one_call, [{"question": "Pick a colour."}])

        adapter = EndpointTraceToTriplet()
        result = await trajectory(store, rollout_id, adapter)
        assert [t.reward for t in result.transitions] == [pytest.approx(0.75)]
        assert adapter.unattributed_rewards == 0

    async def test_a_reward_before_any_call_ended_stays_in_the_return_and_is_counted(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(PromptSampler(renderer, lambda p: ["Red."]))

        (rollout_id,) = await run(store, reward_before_any_call, [{"question": "Pick a colour."}])

        adapter = EndpointTraceToTriplet()
        result = await trajectory(store, rollout_id, adapter)
        assert [t.reward for t in result.transitions] == [1.125]  # the 0.125 emitted first, then 1.0 returned
        assert adapter.unattributed_rewards == 1
        assert adapter.take_metrics()["rewards/n_before_first_call"] == 1
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert [list(s.attributes[RESPONSE_IDS]) for s in spans] == [list(result.transitions[0].ac)]
