"""The Responses API, request fields, stop strings and routes of the lean endpoint, through real clients.

The endpoint runs on the test's loop over a prompt-scripted policy, records into a real in-memory
store, and the records go through ``EndpointTraceToTriplet``, reconstruction and the cookbook's
datums as in training.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agentlightning as agl
import httpx
import openai
import pytest
from tinker_cookbook import renderers

from adapters.endpoint.capture import COMPLETION_SPAN, LOGPROBS, PREFIX, RESPONSE_IDS
from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from domain.sampling import SamplingDefaults
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import trajectory
from tests.support.runs import example_overrides
from tests.support.samplers import TOOL_CALL, PromptSampler
from tests.support.trajectories import assert_extends, assert_one_datum_each

pytestmark = pytest.mark.slow

ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    "strict": True,
}


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=64, published=False) as ep:
        yield ep


async def rollout_base(store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint) -> tuple[str, str]:
    attempted = await store.start_rollout(input={"question": "?"})
    resource = endpoint.as_resource()
    assert isinstance(resource, agl.ProxyLLM)
    return attempted.rollout_id, resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id)


async def completion_spans(store: agl.InMemoryLightningStore, rollout_id: str) -> list[agl.Span]:
    spans = [s for s in await store.query_spans(rollout_id) if s.name == COMPLETION_SPAN]
    return sorted(spans, key=lambda s: s.sequence_id)


def rendered(renderer: renderers.Renderer, messages: list[Any]) -> list[int]:
    return renderer.build_generation_prompt(messages).to_ints()


class TestResponsesApi:
    async def test_a_two_turn_conversation_of_items_continues_token_for_token_and_merges_into_one_datum(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["It is 7!"] if "Higher." in p else ["My guess: 3"])
        endpoint.set_sampler(sampler)
        rollout_id, base = await rollout_base(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        items: list[Any] = [{"role": "user", "content": "Guess my number."}]

        first = await client.responses.create(model="policy", instructions="Be brief.", input=items)
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"role": "user", "content": "Higher."})
        second = await client.responses.create(model="policy", instructions="Be brief.", input=items)

        assert (first.output_text, second.output_text) == ("My guess: 3", "It is 7!")
        assert first.status == "completed" and first.usage is not None
        assert first.usage.output_tokens == len(sampler.tokens("My guess: 3"))
        system_and_user = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Guess my number."}]
        extra = first.model_extra or {}
        assert extra["prompt_token_ids"] == rendered(renderer, system_and_user)
        assert extra["token_ids"] == list(sampler.tokens("My guess: 3"))
        assert extra["system_fingerprint"] == "policy-v1"
        part = first.output[0].content[0]  # type: ignore[union-attr]
        assert [e.logprob for e in part.logprobs or []] == list(sampler.outputs[0][0].logprobs)  # type: ignore[union-attr]
        spans = await completion_spans(store, rollout_id)
        assert [s.attributes[PREFIX] for s in spans] == ["first_turn", "extended"]
        assert list(spans[1].attributes[RESPONSE_IDS]) == list(sampler.tokens("It is 7!"))
        assert list(spans[1].attributes[LOGPROBS]) == list(sampler.outputs[1][0].logprobs)
        result = await trajectory(store, rollout_id)
        assert [t.ob for t in result.transitions] == sampler.prompts
        assert_extends(result)
        await assert_one_datum_each([result])

    async def test_function_calls_go_out_as_items_and_their_outputs_come_back_into_one_datum(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["The answer is 5."] if "<tool_response>" in p else [TOOL_CALL])
        endpoint.set_sampler(sampler)
        rollout_id, base = await rollout_base(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        items: list[Any] = [{"role": "user", "content": "What is 2 + 3?"}]

        first = await client.responses.create(model="policy", input=items, tools=[ADD])  # type: ignore[list-item]
        (call,) = first.output
        assert call.type == "function_call" and call.name == "add"
        assert json.loads(call.arguments) == {"a": 2, "b": 3}
        items += [
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "5"},
        ]
        second = await client.responses.create(model="policy", input=items, tools=[ADD])  # type: ignore[list-item]

        assert second.output_text == "The answer is 5."
        # The first prompt is what the chat path renders for the same tool declaration.
        chat_tool = {"type": "function", "function": {k: ADD[k] for k in ("name", "description", "parameters")}}
        chat = await openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused").chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "What is 2 + 3?"}],
            tools=[chat_tool],  # type: ignore[list-item]
        )
        assert (first.model_extra or {})["prompt_token_ids"] == (chat.model_extra or {})["prompt_token_ids"]
        spans = await completion_spans(store, rollout_id)
        assert [s.attributes[PREFIX] for s in spans] == ["first_turn", "extended"]
        result = await trajectory(store, rollout_id)
        added = renderer.tokenizer.decode(
            list(result.transitions[1].ob[len(sampler.prompts[0]) + len(sampler.outputs[0][0].tokens) :])
        )
        assert "<tool_response>\n5\n</tool_response>" in added
        await assert_one_datum_each([result])

    async def test_a_streamed_response_comes_as_openais_events_and_is_recorded(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: [TOOL_CALL] if "tool" in p else ["Hello there."])
        endpoint.set_sampler(sampler)
        rollout_id, base = await rollout_base(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)

        stream = await client.responses.create(model="policy", input="Say hello.", stream=True)
        events = [event async for event in stream]
        tool_stream = await client.responses.create(model="policy", input="Use a tool.", tools=[ADD], stream=True)  # type: ignore[list-item]
        tool_events = [event async for event in tool_stream]

        kinds = [e.type for e in events]
        assert kinds == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello there."
        final = events[-1].response  # type: ignore[union-attr]
        assert final.output_text == "Hello there." and final.status == "completed"
        done = [e for e in tool_events if e.type == "response.function_call_arguments.done"]
        assert [json.loads(e.arguments) for e in done] == [{"a": 2, "b": 3}]  # type: ignore[union-attr]
        assert tool_events[-1].response.output[0].type == "function_call"  # type: ignore[union-attr]
        assert len(await completion_spans(store, rollout_id)) == 2

    async def test_previous_response_id_continues_within_its_rollout_and_is_refused_by_name_elsewhere(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["7"] if "Higher." in p else ["3"])
        endpoint.set_sampler(sampler)
        rollout_id, base = await rollout_base(store, endpoint)
        _, other_base = await rollout_base(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)

        first = await client.responses.create(model="policy", instructions="Guess.", input="A number?")
        second = await client.responses.create(
            model="policy", instructions="Guess.", input="Higher.", previous_response_id=first.id
        )
        unstored = await client.responses.create(model="policy", input="A number?", store=False)
        other = openai.AsyncOpenAI(base_url=other_base, api_key="unused", max_retries=0)
        refused = []
        for target, previous in ((other, first.id), (client, unstored.id), (client, "resp_unknown")):
            with pytest.raises(openai.BadRequestError) as caught:
                await target.responses.create(model="policy", input="Higher.", previous_response_id=previous)
            refused.append(caught.value)

        assert second.output_text == "7" and second.previous_response_id == first.id
        spans = await completion_spans(store, rollout_id)
        assert [s.attributes[PREFIX] for s in spans] == ["first_turn", "extended", "first_turn"]
        assert sampler.prompts[1][: len(sampler.prompts[0]) + len(sampler.outputs[0][0].tokens)] == (
            sampler.prompts[0] + sampler.outputs[0][0].tokens
        )
        for error in refused:
            body = error.body
            assert isinstance(body, dict) and body["param"] == "previous_response_id"
            assert "send the conversation's items in input" in body["message"]
        assert len(sampler.prompts) == 3  # nothing sampled for the refused ones


RESPONSES_REFUSED = [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
        "input[0].content[0].type",
    ),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0].type"),
    ({"text": {"format": {"type": "json_object"}}}, "text"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"truncation": "auto"}, "truncation"),
    ({"include": ["file_search_call.results"]}, "include"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"n": 2}, "n"),
    ({"frobnicate": True}, "frobnicate"),
]
CHAT_REFUSED = [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"logit_bias": {"42": 5}}, "logit_bias"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"presence_penalty": -1}, "presence_penalty"),
    ({"top_logprobs": 2, "logprobs": True}, "top_logprobs"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "add"}}}, "tool_choice"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"temperature": "hot"}, "temperature"),
    ({"n": 0}, "n"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        "messages[0].content[0].type",
    ),
    ({"tools": [{"type": "custom", "custom": {"name": "grammar"}}]}, "tools"),
    ({"frobnicate": True}, "frobnicate"),
]
CHAT_NEUTRAL = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": {},
    "response_format": {"type": "text"},
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "top_logprobs": 0,
    "logprobs": True,
    "user": "u-1",
    "metadata": {"k": "v"},
    "store": False,
    "modalities": ["text"],
}


class TestRequestFields:
    @pytest.mark.parametrize(
        ("route", "extra", "param"),
        [("responses", *r) for r in RESPONSES_REFUSED] + [("chat/completions", *c) for c in CHAT_REFUSED],
    )
    async def test_a_field_the_endpoint_cannot_honour_is_refused_with_a_400_naming_it(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer, route: str, extra: dict[str, Any], param: str
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["ok"])
        endpoint.set_sampler(sampler)
        base_body: dict[str, Any] = (
            {"model": "policy", "input": "hi"}
            if route == "responses"
            else {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
        )
        async with httpx.AsyncClient() as client:
            reply = await client.post(f"{endpoint.endpoint}/{route}", json={**base_body, **extra})

        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] == "400"
        assert param.split("[")[0] in error["message"] or "role" in error["message"] or "input" in error["message"]
        assert sampler.prompts == []

    async def test_neutral_values_are_accepted_on_both_apis(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(PromptSampler(renderer, lambda p: ["ok"]))
        async with httpx.AsyncClient() as client:
            chat = await client.post(
                f"{endpoint.endpoint}/chat/completions",
                json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], **CHAT_NEUTRAL},
            )
            responses = await client.post(
                f"{endpoint.endpoint}/responses",
                json={
                    "model": "policy",
                    "input": "hi",
                    "include": ["message.output_text.logprobs"],
                    "text": {"format": {"type": "text"}},
                    "truncation": "disabled",
                    "tool_choice": "auto",
                    "top_logprobs": 0,
                    "metadata": {"k": "v"},
                    "max_output_tokens": 8,
                    "temperature": 0.5,
                    "top_p": 0.9,
                },
            )

        assert chat.status_code == 200, chat.text
        assert responses.status_code == 200, responses.text
        assert responses.json()["metadata"] == {"k": "v"} and responses.json()["temperature"] == 0.5

    async def test_sampling_fields_of_a_response_reach_the_sampler(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["ok"])
        endpoint.set_sampler(sampler)
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)

        await client.responses.create(model="policy", input="hi", max_output_tokens=9, temperature=0.25, top_p=0.5)

        (params,) = sampler.params
        assert (params.max_tokens, params.temperature, params.top_p) == (9, 0.25, 0.5)

    async def test_stop_strings_are_left_out_of_the_content_while_the_sampled_tokens_are_trained_and_continued(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["Done."] if "Again" in p else ["42 END and more"])
        endpoint.set_sampler(sampler)
        rollout_id, base = await rollout_base(store, endpoint)
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Answer."}]

        first = await client.chat.completions.create(model="policy", messages=messages, stop=["END"])
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "Again"},
        ]
        await client.chat.completions.create(model="policy", messages=messages)

        assert first.choices[0].message.content == "42 "
        assert first.choices[0].finish_reason == "stop"
        sampled = sampler.tokens("42 END", end=False)
        assert (first.choices[0].model_extra or {})["token_ids"] == list(sampled)
        spans = await completion_spans(store, rollout_id)
        assert list(spans[0].attributes[RESPONSE_IDS]) == list(sampled)
        assert [s.attributes[PREFIX] for s in spans] == ["first_turn", "extended"]
        result = await trajectory(store, rollout_id)
        assert result.transitions[0].ac == sampled
        assert_extends(result)
        await assert_one_datum_each([result])


class TestRoutes:
    async def test_models_answer_under_every_base_url_and_other_routes_404_by_name(
        self, store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(PromptSampler(renderer, lambda p: ["ok"]))
        _, base = await rollout_base(store, endpoint)
        root = endpoint.endpoint.removesuffix("/v1")
        async with httpx.AsyncClient() as client:
            for url in (root, f"{root}/v1", base, f"{base}/v1"):
                models = await client.get(f"{url}/models")
                assert models.status_code == 200, url
                assert [m["id"] for m in models.json()["data"]] == ["policy"]
            assert endpoint.backend_failure() is None
            missing = [await client.post(f"{base}/v1/embeddings", json={}) for _ in range(2)]
            other = await client.post(f"{root}/v1/completions", json={})
            wrong_method = await client.get(f"{root}/v1/responses")

        for reply in missing:
            assert reply.status_code == 404
            error = reply.json()["error"]
            assert error["type"] == "not_found" and "/v1/embeddings" in error["message"]
            assert "POST /responses" in error["message"] and "GET /models" in error["message"]
        assert other.status_code == 404
        assert wrong_method.status_code == 405 and "error" in wrong_method.json()
        failure = endpoint.backend_failure()
        assert failure is not None and failure.startswith("the endpoint answered 404 on POST .../v1/embeddings 2 times")
        assert "of 4 failed requests" in failure
        metrics = endpoint.take_metrics()
        assert (metrics["endpoint/failed/404"], metrics["endpoint/failed/405"]) == (3.0, 1.0)
        assert "endpoint/failed/404" not in endpoint.take_metrics()

    async def test_an_openai_client_sees_the_404_message_naming_the_route(
        self, endpoint: PolicyEndpoint, renderer: renderers.Renderer
    ) -> None:
        endpoint.set_sampler(PromptSampler(renderer, lambda p: ["ok"]))
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)

        with pytest.raises(openai.NotFoundError) as caught:
            await client.embeddings.create(model="policy", input="hi")

        assert "POST /v1/embeddings is not served" in str(caught.value)


class TestReportedFailures:
    async def test_a_run_that_trains_nothing_names_the_route_its_agents_were_refused(
        self, tmp_path: Path, tiny_model: Path
    ) -> None:
        from app.config import load_config
        from app.launch import train
        from app.usecases.steps import NothingToTrain

        overrides = example_overrides(tmp_path, tiny_model, "multiturn", "guess_number")
        overrides = [o for o in overrides if not o.startswith("agent=")]
        overrides += ["agent=tests.integration.refused_agents:legacy_completions_agent", "max_empty_batches=1"]
        cfg = load_config(None, overrides).unwrap()

        with pytest.raises(NothingToTrain) as caught:
            await asyncio.wait_for(train(cfg), 150)

        message = str(caught.value)
        assert "no trainable rollout" in message
        assert "the endpoint answered 404 on POST .../completions 4 times of 4 failed requests" in message
        assert "is not served" in message

    async def test_the_litellm_server_refuses_the_responses_api_by_name_and_still_serves_chat(
        self, store: agl.InMemoryLightningStore, renderer: renderers.Renderer
    ) -> None:
        sampler = PromptSampler(renderer, lambda p: ["ok"])
        config = EndpointConfig(server="litellm", defaults=SamplingDefaults(max_tokens=16))
        async with PolicyEndpoint(store, renderer, config, sampler=sampler) as ep:
            client = openai.AsyncOpenAI(base_url=ep.endpoint, api_key="unused", max_retries=0)
            with pytest.raises(openai.BadRequestError) as caught:
                await client.responses.create(model="policy", input="hi")
            chat = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])

        assert "served by the lean endpoint server only (endpoint_server=lean)" in str(caught.value)
        assert chat.choices[0].message.content == "ok"
        assert len(sampler.prompts) == 1
