"""The lean endpoint server: real OpenAI, LiteLLM and httpx clients against a scripted policy.

The server runs on the test's event loop (the loop that owns the sampler), records each
completion served under a rollout's URL in a real in-memory store, and answers errors in
OpenAI's JSON shape.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import agentlightning as agl
import httpx
import litellm
import openai
import pytest
from tinker_cookbook import renderers

from adapters.endpoint.capture import COMPLETION_SPAN, LOGPROBS, POLICY_VERSION, PROMPT_IDS, RESPONSE_IDS
from adapters.endpoint.policy_endpoint import EndpointConfig, EndpointError, PolicyEndpoint
from tests.support.endpoints import policy_endpoint
from tests.support.samplers import CharSampler

pytestmark = pytest.mark.slow

QUESTION = "Guess my number."
MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def scripted(renderer: renderers.Renderer, reply: str, delay_s: float = 0.0) -> CharSampler:
    """Replies ``reply`` one token per character, with logprobs exact in any float width."""
    return CharSampler(renderer, [reply], delay_s=delay_s, step=0.0625)


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=32, published=False) as ep:
        assert ep.config.server == "lean"
        yield ep


async def rollout_url(store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint) -> tuple[str, str, str]:
    """A started rollout's ids and its base URL, read the way agents read it."""
    attempted = await store.start_rollout(input={"question": QUESTION})
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    resource = endpoint.as_resource()
    assert isinstance(resource, agl.ProxyLLM)
    return rollout_id, attempt_id, resource.get_base_url(rollout_id, attempt_id)


def prompt_of(renderer: renderers.Renderer) -> list[int]:
    return renderer.build_generation_prompt([{"role": "user", "content": QUESTION}]).to_ints()


class TestClients:
    async def test_async_openai_under_a_rollout_url_gets_token_ids_and_the_completion_is_recorded(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = scripted(renderer, "I'm 42.")
        endpoint.set_sampler(sampler)
        rollout_id, attempt_id, base = await rollout_url(store, endpoint)
        assert base == f"{endpoint.endpoint.removesuffix('/v1')}/rollout/{rollout_id}/attempt/{attempt_id}"
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)

        replies = [await client.chat.completions.create(model="policy", messages=MESSAGES) for _ in range(2)]

        for reply in replies:
            assert reply.choices[0].message.content == "I'm 42."
            assert reply.system_fingerprint == "policy-v1"
            extra = reply.model_extra or {}
            assert extra["prompt_token_ids"] == prompt_of(renderer)
            assert (reply.choices[0].model_extra or {})["token_ids"] == list(sampler.tokens)
            logprobs = reply.choices[0].logprobs
            assert logprobs is not None and [e.logprob for e in logprobs.content or []] == list(sampler.logprobs)
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert [(s.rollout_id, s.attempt_id) for s in spans] == [(rollout_id, attempt_id)] * 2
        first, second = sorted(s.sequence_id for s in spans)
        assert second > first
        assert await store.get_next_span_sequence_id(rollout_id, attempt_id) == second + 1
        for span in spans:
            assert list(span.attributes[PROMPT_IDS]) == prompt_of(renderer)
            assert list(span.attributes[RESPONSE_IDS]) == list(sampler.tokens)
            assert list(span.attributes[LOGPROBS]) == list(sampler.logprobs)
        assert endpoint.take_metrics()["endpoint/capture/recorded"] == 2.0
        assert sampler.loops == [asyncio.get_running_loop()] * 2

    async def test_the_sync_openai_client_is_served_from_another_thread(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(scripted(renderer, "I'm 7."))
        client = openai.OpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)

        reply = await asyncio.to_thread(client.chat.completions.create, model="policy", messages=MESSAGES)
        chunks = await asyncio.to_thread(
            lambda: list(client.chat.completions.create(model="policy", messages=MESSAGES, stream=True))
        )

        assert reply.choices[0].message.content == "I'm 7."
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "I'm 7."
        assert endpoint.take_metrics() == {"endpoint/capture/unattributed": 2.0}

    async def test_litellm_with_an_api_base_and_streaming(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(scripted(renderer, "I'm 5."))
        rollout_id, _, base = await rollout_url(store, endpoint)

        reply = await litellm.acompletion(model="openai/policy", api_base=base, api_key="unused", messages=MESSAGES)
        stream = await litellm.acompletion(
            model="openai/policy", api_base=base, api_key="unused", messages=MESSAGES, stream=True
        )
        text = ""
        async for chunk in cast(AsyncIterator[Any], stream):
            text += chunk.choices[0].delta.content or ""

        assert reply.choices[0].message.content == text == "I'm 5."
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert len(spans) == 2

    async def test_an_openai_stream_carries_content_token_ids_logprobs_and_the_finish_reason(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = scripted(renderer, "I'm 3.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)

        stream = await client.chat.completions.create(
            model="policy", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]

        choices = [c.choices[0] for c in chunks if c.choices]
        assert choices[0].delta.role == "assistant"
        assert "".join(c.delta.content or "" for c in choices) == "I'm 3."
        assert [c.finish_reason for c in choices if c.finish_reason] == ["stop"]
        assert (choices[0].model_extra or {})["token_ids"] == list(sampler.tokens)
        assert choices[0].logprobs is not None
        assert [e.logprob for e in choices[0].logprobs.content or []] == list(sampler.logprobs)
        assert (chunks[0].model_extra or {})["prompt_token_ids"] == prompt_of(renderer)
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == len(sampler.tokens)

    async def test_raw_http_on_every_route(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(scripted(renderer, "I'm 9."))
        rollout_id, _, base = await rollout_url(store, endpoint)
        root = endpoint.endpoint.removesuffix("/v1")
        body = {"model": "policy", "messages": MESSAGES}
        async with httpx.AsyncClient() as client:
            for url in (f"{root}/v1", root, f"{base}/v1", base):
                response = await client.post(f"{url}/chat/completions", json=body)
                assert response.status_code == 200, url
                assert response.json()["choices"][0]["message"]["content"] == "I'm 9."
            models = await client.get(f"{root}/v1/models")
            assert [m["id"] for m in models.json()["data"]] == ["policy"]
            assert (await client.get(f"{root}/models")).status_code == 200
            assert (await client.get(f"{root}/health/liveliness")).status_code == 200
            not_json = await client.post(f"{root}/v1/chat/completions", content=b"{not json")
            assert not_json.status_code == 400
            assert not_json.json()["error"]["type"] == "invalid_request_error"
        spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
        assert len(spans) == 2

    async def test_the_lean_reply_carries_what_the_litellm_proxys_reply_carries(
        self, store: agl.InMemoryLightningStore, renderer: renderers.Renderer
    ) -> None:
        replies: dict[str, dict[str, Any]] = {}
        for server in ("lean", "litellm"):
            config = EndpointConfig(server=cast(Any, server))
            async with PolicyEndpoint(store, renderer, config, sampler=scripted(renderer, "I'm 1.")) as ep:
                async with httpx.AsyncClient() as client:
                    response = await client.post(
                        f"{ep.endpoint}/chat/completions", json={"model": "policy", "messages": MESSAGES}
                    )
                replies[server] = response.json()
        lean, proxied = replies["lean"], replies["litellm"]
        for key in ("model", "object", "system_fingerprint", "prompt_token_ids", "usage"):
            assert lean[key] == proxied[key], key
        assert lean["choices"] == proxied["choices"]


class TestPolicyVersions:
    async def test_set_sampler_swaps_the_policy_between_requests_on_the_same_server(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        rollout_id, _, base = await rollout_url(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        url = endpoint.endpoint

        endpoint.set_sampler(scripted(renderer, "I'm 1."))
        first = await client.chat.completions.create(model="policy", messages=MESSAGES)
        version = endpoint.set_sampler(scripted(renderer, "I'm 2."))
        second = await client.chat.completions.create(model="policy", messages=MESSAGES)

        assert (first.choices[0].message.content, second.choices[0].message.content) == ("I'm 1.", "I'm 2.")
        assert (first.system_fingerprint, second.system_fingerprint) == (f"policy-v{version - 1}", f"policy-v{version}")
        spans = sorted(
            (s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN), key=lambda s: s.sequence_id
        )
        assert [s.attributes[POLICY_VERSION] for s in spans] == [version - 1, version]
        assert endpoint.is_running and endpoint.endpoint == url


class TestErrors:
    async def test_a_bad_request_gets_a_400_with_the_reason(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = scripted(renderer, "I'm 6.")
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match=r"n 99 must lie in"):
            await client.chat.completions.create(model="policy", messages=MESSAGES, n=99)
        with pytest.raises(openai.BadRequestError, match="role 'wizard'"):
            await client.chat.completions.create(model="policy", messages=[{"role": "wizard", "content": "hi"}])  # type: ignore[list-item,misc]
        assert sampler.prompts == []

    async def test_without_a_sampler_the_server_answers_503(self, endpoint: PolicyEndpoint) -> None:
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{endpoint.endpoint}/chat/completions", json={"model": "policy", "messages": MESSAGES}
            )
        assert response.status_code == 503
        assert response.json()["error"]["message"] == "no policy sampler is set yet"

    async def test_a_sampler_past_the_request_timeout_gets_a_504(
        self, store: agl.InMemoryLightningStore, renderer: renderers.Renderer
    ) -> None:
        config = EndpointConfig(request_timeout_s=0.05)
        sampler = scripted(renderer, "x", delay_s=5.0)
        async with PolicyEndpoint(store, renderer, config, sampler=sampler) as ep, httpx.AsyncClient() as client:
            response = await client.post(
                f"{ep.endpoint}/chat/completions", json={"model": "policy", "messages": MESSAGES}
            )
        assert response.status_code == 504
        assert "sampling took longer" in response.json()["error"]["message"]

    async def test_beyond_loopback_a_missing_or_wrong_key_gets_401(
        self, monkeypatch: pytest.MonkeyPatch, store: agl.InMemoryLightningStore, renderer: renderers.Renderer
    ) -> None:
        monkeypatch.setenv("AGL_TINKER_MASTER_KEY", "sk-lean-canary")
        config = EndpointConfig(host="0.0.0.0")
        async with PolicyEndpoint(store, renderer, config, sampler=scripted(renderer, "I'm 8.")) as ep:
            url = f"http://127.0.0.1:{httpx.URL(ep.endpoint).port}"
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{url}/health/liveliness")).status_code == 200
                body = {"model": "policy", "messages": MESSAGES}
                for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
                    response = await client.post(f"{url}/chat/completions", json=body, headers=headers)
                    assert response.status_code == 401
                    assert response.json()["error"]["type"] == "authentication_error"
            good = openai.AsyncOpenAI(base_url=url, api_key="sk-lean-canary", max_retries=0)
            reply = await good.chat.completions.create(model="policy", messages=MESSAGES)
            assert reply.choices[0].message.content == "I'm 8."

    async def test_a_taken_port_fails_start_up_naming_the_port(
        self, store: agl.InMemoryLightningStore, renderer: renderers.Renderer
    ) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            endpoint = PolicyEndpoint(store, renderer, EndpointConfig(port=port))
            with pytest.raises(EndpointError, match=f"port {port} .*in use"):
                await endpoint.start()
        assert not endpoint.is_running


def test_stream_chunks_are_valid_json_lines() -> None:
    """The stream is made of ``data: <json>`` events ending in ``[DONE]`` (also for tool calls and n > 1)."""
    from adapters.endpoint.server import stream_chunks

    response = {
        "id": "c",
        "created": 1,
        "model": "policy",
        "system_fingerprint": "policy-v0",
        "prompt_token_ids": [1],
        "choices": [
            {
                "index": i,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": "{}"}}],
                },
                "token_ids": [2],
            }
            for i in range(2)
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    events = list(stream_chunks(response, include_usage=False))
    assert events[-1] == "data: [DONE]\n\n"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert [p["choices"][0]["index"] for p in payloads] == [0, 0, 1, 1]
    assert payloads[0]["choices"][0]["delta"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert payloads[1]["choices"][0]["finish_reason"] == "tool_calls"
