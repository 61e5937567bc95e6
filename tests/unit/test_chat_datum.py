"""A warm-start chat in OpenAI's fine-tuning format trains on exactly the tokens the endpoint serves and parses."""

from __future__ import annotations

import json

import pytest
from tinker_cookbook import renderers

from adapters.cookbook.training import chat_datum
from adapters.endpoint.provider import prompt_tokens
from adapters.local.tiny_model import build_tokenizer
from domain.chats import Chat, parse_chat
from examples.tools.agent import SYSTEM, TOOLS


@pytest.fixture(scope="module")
def renderer() -> renderers.Renderer:
    return renderers.get_renderer("qwen3_instruct", build_tokenizer())


CALL = {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}
EXCHANGE: list[dict[str, object]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is 3 + 4?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_0", "content": "7"},
    {"role": "assistant", "content": "The answer is 7."},
]


def tokens(chat: Chat, renderer: renderers.Renderer) -> list[int]:
    datum = chat_datum(chat, renderer)
    return [*datum.model_input, datum.target_tokens[-1]]


def test_each_turn_starts_from_the_prompt_the_endpoint_renders_for_that_request(renderer: renderers.Renderer) -> None:
    chat = parse_chat(json.dumps({"messages": EXCHANGE, "tools": TOOLS})).unwrap()
    trained = tokens(chat, renderer)
    for request in (EXCHANGE[:2], EXCHANGE[:4]):  # the question, then the question, the call and its result
        served = prompt_tokens(renderer, request, TOOLS)
        assert trained[: len(served)] == served


def test_the_trained_call_is_one_the_endpoint_parses_back_into_the_same_call(renderer: renderers.Renderer) -> None:
    trained = tokens(Chat(EXCHANGE, TOOLS), renderer)
    start = len(prompt_tokens(renderer, EXCHANGE[:2], TOOLS))
    end = len(prompt_tokens(renderer, EXCHANGE[:4], TOOLS))
    sampled = trained[start:end]
    # The call turn as sampled ends at the end-of-turn token; what follows it is the tool message's framing.
    sampled = sampled[: sampled.index(renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")) + 1]
    message, _ok = renderer.parse_response(sampled)
    (call,) = message.get("tool_calls") or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 3, "b": 4})


def test_only_the_assistant_turns_carry_weight(renderer: renderers.Renderer) -> None:
    datum = chat_datum(Chat(EXCHANGE, TOOLS), renderer)
    weighted = [t for t, w in zip(datum.target_tokens, datum.weights, strict=True) if w > 0]
    text = renderer.tokenizer.decode(weighted)
    assert '"add"' in text and "The answer is 7." in text
    assert "What is" not in text and "<tool_response>" not in text and "# Tools" not in text


def test_a_chat_without_tools_trains_on_its_prompt_and_reply(renderer: renderers.Renderer) -> None:
    chat = [{"role": "user", "content": "seven"}, {"role": "assistant", "content": "7"}]
    trained = tokens(Chat(chat), renderer)
    served = prompt_tokens(renderer, chat[:1], None)
    assert trained[: len(served)] == served
    assert renderer.tokenizer.decode(trained[len(served) :]) == "7<|im_end|>"
