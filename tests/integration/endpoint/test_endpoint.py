"""The agent-facing endpoint through Agent-lightning's real LLMProxy, store, runner and tracer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import agentlightning as agl
import openai
import pytest
from tinker_cookbook import renderers

from adapters.endpoint.policy_endpoint import EndpointConfig, MasterKeyRequired, PolicyEndpoint
from adapters.local import LocalSampler
from ports.policy import SampledSequence, SamplingParams, StopReason
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import run

pytestmark = pytest.mark.slow

QUESTION = "Please answer with a single number."


class FixedSampler:
    """A deterministic policy: always the same reply, with known logprobs; records each call."""

    def __init__(self, renderer: renderers.Renderer, reply: str) -> None:
        tokenizer = renderer.tokenizer
        im_end = cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.tokens = (*cast(list[int], tokenizer.encode(reply, add_special_tokens=False)), im_end)
        self.logprobs = tuple(-0.125 * (i + 1) for i in range(len(self.tokens)))
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        self.loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        self.prompts.append(list(prompt_tokens))
        self.params.append(params)
        return [SampledSequence(self.tokens, self.logprobs, StopReason.STOP)] * num_samples


class RecordingSampler:
    """Wraps a real sampler and keeps what it produced."""

    def __init__(self, inner: LocalSampler) -> None:
        self.inner = inner
        self.outputs: list[SampledSequence] = []

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        sequences = await self.inner.sample(prompt_tokens, params, num_samples)
        self.outputs.extend(sequences)
        return sequences


AgentFn = Callable[[dict[str, str], agl.LLM], Awaitable[None]]
rollout = cast(Callable[[AgentFn], agl.LitAgent[dict[str, str]]], agl.rollout)
"""``agl.rollout`` with its type spelled out (agentlightning leaves the decorator untyped)."""


@rollout
async def number_agent(task: dict[str, str], llm: agl.LLM) -> None:
    """Written the way users write agents: a plain OpenAI client against the resource."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused-on-loopback")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16
    )
    agl.emit_reward(1.0 if task["answer"] in (reply.choices[0].message.content or "") else 0.0)


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=32, published=False) as ep:
        yield ep


async def run_rollouts(store: agl.InMemoryLightningStore, tasks: Sequence[dict[str, str]]) -> list[str]:
    return await run(store, number_agent, tasks, succeeded=False)


async def triplets_of(store: agl.InMemoryLightningStore, rollout_id: str) -> list[agl.Triplet]:
    spans = await store.query_spans(rollout_id)
    return cast(list[agl.Triplet], agl.TracerTraceToTriplet().adapt(list(spans)))


class TestRolloutsThroughTheProxy:
    async def test_the_triplet_holds_the_samplers_exact_tokens_logprobs_and_the_reward(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 42.")
        endpoint.set_sampler(sampler)
        await store.add_resources({"main_llm": endpoint.as_resource()})

        (rollout_id,) = await run_rollouts(store, [{"question": QUESTION, "answer": "42"}])

        rollout = await store.get_rollout_by_id(rollout_id)
        assert rollout is not None and rollout.status == "succeeded"
        (triplet,) = await triplets_of(store, rollout_id)
        expected_prompt = renderer.build_generation_prompt([{"role": "user", "content": QUESTION}]).to_ints()
        assert sampler.prompts == [expected_prompt]
        assert list(triplet.prompt["token_ids"]) == expected_prompt
        assert list(triplet.response["token_ids"]) == list(sampler.tokens)
        assert [entry["logprob"] for entry in triplet.response["logprobs"]] == list(sampler.logprobs)
        assert triplet.reward == 1.0
        assert sampler.params[0].max_tokens == 16

    async def test_requests_served_on_the_proxy_thread_sample_on_the_owners_loop(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 7.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused")
        await asyncio.gather(
            *(
                client.chat.completions.create(model="policy", messages=[{"role": "user", "content": QUESTION}])
                for _ in range(4)
            )
        )
        assert sampler.loops == [asyncio.get_running_loop()] * 4

    async def test_a_real_local_sampler_serves_rollouts_with_its_own_logprobs(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, tiny_model: Path
    ) -> None:
        sampler = RecordingSampler(LocalSampler.from_pretrained(tiny_model))
        endpoint.set_sampler(sampler)
        await store.add_resources({"main_llm": endpoint.as_resource()})

        ids = await run_rollouts(store, [{"question": QUESTION, "answer": "1"}] * 2)

        triplets = [t for rollout_id in ids for t in await triplets_of(store, rollout_id)]
        assert len(triplets) == len(sampler.outputs) == 2
        by_tokens = {s.tokens: s for s in sampler.outputs}
        for triplet in triplets:
            produced = by_tokens[tuple(triplet.response["token_ids"])]
            assert [entry["logprob"] for entry in triplet.response["logprobs"]] == list(produced.logprobs)
            assert all(lp <= 0.0 for lp in produced.logprobs) and 1 <= len(produced.tokens) <= 16


class TestSwitchingPolicies:
    async def test_set_sampler_changes_replies_on_the_same_running_proxy(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused")
        url = endpoint.endpoint
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]

        endpoint.set_sampler(FixedSampler(renderer, "I'm 1."))
        first = await client.chat.completions.create(model="policy", messages=messages)
        version = endpoint.set_sampler(FixedSampler(renderer, "I'm 2."))
        second = await client.chat.completions.create(model="policy", messages=messages)

        assert (first.choices[0].message.content, second.choices[0].message.content) == ("I'm 1.", "I'm 2.")
        assert second.system_fingerprint == f"policy-v{version}" != first.system_fingerprint
        assert endpoint.is_running and endpoint.endpoint == url

    async def test_eval_defaults_apply_until_restored(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 3.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused")
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]

        previous = endpoint.set_temperature(0.0)
        await client.chat.completions.create(model="policy", messages=messages)
        endpoint.set_sampling_defaults(previous)
        await client.chat.completions.create(model="policy", messages=messages)

        assert [p.temperature for p in sampler.params] == [0.0, 1.0]


class TestRequestParameters:
    async def test_request_parameters_reach_the_sampler_with_the_renderers_stop_token(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 5.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused")
        reply = await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=7,
            temperature=0.5,
            top_p=0.9,
            seed=11,
            stop=["\n\n"],
            n=2,
            extra_body={"top_k": 5},
        )
        await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": QUESTION}])

        im_end = cast(int, renderer.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        assert sampler.params == [
            SamplingParams(7, 0.5, 5, 0.9, stop_token_ids=(im_end,), stop_strings=("\n\n",), seed=11),
            SamplingParams(32, 1.0, -1, 1.0, stop_token_ids=(im_end,)),
        ]
        assert len(reply.choices) == 2
        assert reply.choices[0].finish_reason == "stop"

    @pytest.mark.parametrize(
        "bad",
        [{"temperature": 2.5}, {"max_tokens": 100_000}, {"top_p": 0.0}, {"n": 99}, {"extra_body": {"top_k": 0}}],
    )
    async def test_out_of_bounds_parameters_are_rejected_as_bad_requests(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer, bad: dict[str, Any]
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 6.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model="policy",
                messages=[{"role": "user", "content": QUESTION}],
                **bad,
            )
        assert sampler.params == []

    @pytest.mark.parametrize(
        ("messages", "reason"),
        [
            ([], "non-empty list"),
            ([{"role": "wizard", "content": "hi"}], "role 'wizard'"),
            ([{"role": "user", "content": "x " * 200}], "this policy serves at most 64"),
        ],
        ids=["empty", "unknown-role", "too-long"],
    )
    async def test_unservable_messages_get_a_400_with_the_reason_before_any_sampling(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer, messages: list[Any], reason: str
    ) -> None:
        sampler = FixedSampler(renderer, "I'm 6.")
        endpoint.set_sampler(sampler)
        endpoint.set_sampling_defaults(replace(endpoint.sampling_defaults, max_prompt_tokens=64))
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match=reason):
            await client.chat.completions.create(model="policy", messages=messages)
        assert sampler.params == []


class TestBinding:
    async def test_binding_beyond_loopback_without_a_master_key_is_refused(
        self, monkeypatch: pytest.MonkeyPatch, renderer: renderers.Renderer
    ) -> None:
        monkeypatch.delenv("AGL_TINKER_MASTER_KEY", raising=False)
        store = agl.InMemoryLightningStore(thread_safe=True)
        with pytest.raises(MasterKeyRequired, match="AGL_TINKER_MASTER_KEY"):
            PolicyEndpoint(store, renderer, EndpointConfig(host="0.0.0.0"))

    async def test_a_master_key_from_the_environment_allows_it_and_stays_out_of_errors(
        self, monkeypatch: pytest.MonkeyPatch, renderer: renderers.Renderer
    ) -> None:
        monkeypatch.setenv("AGL_TINKER_MASTER_KEY", "sk-secret-value-123")
        store = agl.InMemoryLightningStore(thread_safe=True)
        endpoint = PolicyEndpoint(store, renderer, EndpointConfig(host="0.0.0.0"))
        with pytest.raises(Exception, match="not started") as info:
            endpoint.as_resource()
        assert "sk-secret-value-123" not in repr(endpoint) + str(info.value)
        assert endpoint.config.host == "0.0.0.0"

    async def test_beyond_loopback_a_missing_or_wrong_key_gets_401_and_the_key_never_reaches_disk(
        self, monkeypatch: pytest.MonkeyPatch, renderer: renderers.Renderer
    ) -> None:
        canary = "sk-canary-7f3a9c1e5b"
        monkeypatch.setenv("AGL_TINKER_MASTER_KEY", canary)
        store = agl.InMemoryLightningStore(thread_safe=True)
        # Pinned to LiteLLM: its config goes to a file on disk (the lean server's 401s are in test_endpoint_server).
        config = EndpointConfig(host="0.0.0.0", server="litellm")
        async with PolicyEndpoint(store, renderer, config) as endpoint:
            endpoint.set_sampler(FixedSampler(renderer, "I'm 8."))
            url = endpoint.endpoint.replace("0.0.0.0", "127.0.0.1")
            messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]
            for key in ("", "sk-wrong"):
                client = openai.AsyncOpenAI(base_url=url, api_key=key or "unused", max_retries=0)
                if not key:
                    client = client.with_options(default_headers={"Authorization": ""})
                with pytest.raises(openai.AuthenticationError):
                    await client.chat.completions.create(model="policy", messages=messages)
            good = openai.AsyncOpenAI(base_url=url, api_key=canary, max_retries=0)
            reply = await good.chat.completions.create(model="policy", messages=messages)
            assert reply.choices[0].message.content == "I'm 8."
            config_file = endpoint._proxy._config_file  # type: ignore[union-attr]
            assert config_file is not None and canary not in Path(config_file).read_text()
