"""OpenAI's Responses API over the chat path: input items in, chat messages to the provider, a Response out.

``POST /responses`` is translated, not served twice: ``instructions`` become a system message, the
``input`` items become the chat messages the renderer already handles, flat function ``tools``
become chat tools, and ``PolicyProvider.complete`` samples, records and continues token for token
exactly as for ``/chat/completions``. The translation keeps a reply's identity: the reply's
``message`` item and the ``function_call`` items after it become one assistant message again (its
text and tool calls), so an agent that sends the output items back continues the served turn token
for token and a multi-turn conversation merges into one datum.

Items translated (``input`` as a string is one user message):

- ``message`` (``type`` may be left out, the "easy" form) with role ``user``, ``system``,
  ``developer`` or ``assistant``; content a string or ``input_text``/``output_text`` parts;
- ``function_call`` (``call_id``, ``name``, ``arguments``): a tool call of the assistant message
  just before it (a new assistant message when there is none);
- ``function_call_output`` (``call_id``, ``output``): a ``tool`` message.

Other items (images, files, reasoning, item references, built-in tool calls) are refused by name.
``previous_response_id`` is served within the rollout (or the unscoped URL) that created the
response, while the endpoint remembers it (``store`` not false, the most recent ``RESPONSE_LOG_SIZE``);
otherwise a 400 asks for the items in ``input``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from adapters.endpoint.provider import BadParam

RESPONSE_LOG_SIZE = 4096
"""Responses the endpoint remembers for ``previous_response_id`` (least recently created dropped first)."""

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
Scope = tuple[str, str] | None
"""The rollout attempt a response was served to (``None``: the unscoped URL)."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A Responses request as the chat path takes it."""

    messages: list[dict[str, Any]]
    """``instructions`` (as a system message), the previous response's conversation, then ``input``."""
    history: list[dict[str, Any]]
    """The conversation without ``instructions`` (what a later ``previous_response_id`` continues)."""
    params: dict[str, object]
    """Chat-completion parameters: ``max_tokens``, ``temperature``, ``top_p``, ``tools``, ..."""


class ResponseLog:
    """The conversations of recent responses, per rollout attempt, for ``previous_response_id``."""

    def __init__(self, size: int = RESPONSE_LOG_SIZE) -> None:
        self._entries: OrderedDict[str, tuple[Scope, list[dict[str, Any]]]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def add(self, response_id: str, scope: Scope, conversation: list[dict[str, Any]]) -> None:
        with self._lock:
            self._entries[response_id] = (scope, conversation)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def conversation(self, response_id: object, scope: Scope) -> list[dict[str, Any]]:
        if not isinstance(response_id, str):
            raise BadParam("previous_response_id", "previous_response_id must be a string")
        with self._lock:
            entry = self._entries.get(response_id)
        if entry is None or entry[0] != scope:
            raise BadParam(
                "previous_response_id",
                f"previous response {response_id!r} is not known here: the endpoint keeps responses only within "
                "the rollout that created them (and not with store=false); send the conversation's items in input",
            )
        return [dict(m) for m in entry[1]]


def _text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadParam(where, f"{where} must be a string or a list of text parts")
    texts: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in _TEXT_PARTS or not isinstance(cast(Mapping[str, object], part).get("text"), str):
            raise BadParam(f"{where}[{j}].type", f"{where}[{j}] of type {kind!r} is not served: text parts only")
        texts.append(cast(str, cast(Mapping[str, object], part)["text"]))
    return "".join(texts)


def input_messages(items: object) -> list[dict[str, Any]]:
    """Chat messages from a Responses ``input`` (a string, or a list of items)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise BadParam("input", "input must be a string or a list of items")
    messages: list[dict[str, Any]] = []
    open_reply = False  # the last message is an assistant reply that following function_call items join
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise BadParam(f"input[{i}]", f"input[{i}] must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise BadParam(f"input[{i}].role", f"input[{i}] has role {role!r}")
            messages.append({"role": role, "content": _text(item.get("content"), f"input[{i}].content")})
            open_reply = role == "assistant"
        elif kind == "function_call":
            name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
            if not (isinstance(name, str) and isinstance(arguments, str) and isinstance(call_id, str)):
                raise BadParam(f"input[{i}]", f"input[{i}] (function_call) needs string call_id, name and arguments")
            if not open_reply:
                messages.append({"role": "assistant", "content": ""})
                open_reply = True
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise BadParam(f"input[{i}].call_id", f"input[{i}] (function_call_output) needs a string call_id")
            output = _text(item.get("output"), f"input[{i}].output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
            open_reply = False
        else:
            raise BadParam(
                f"input[{i}].type",
                f"input[{i}] of type {kind!r} is not served: message, function_call and function_call_output only",
            )
    return messages


def chat_tools(tools: object) -> list[dict[str, Any]] | None:
    """Responses' flat function tools as chat tools; other tool types are refused by name."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise BadParam("tools", "tools must be a list")
    converted: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind != "function":
            raise BadParam(f"tools[{i}].type", f"tools[{i}] of type {kind!r} is not served: function tools only")
        spec = cast(Mapping[str, object], tool)
        if not isinstance(spec.get("name"), str):
            raise BadParam(f"tools[{i}].name", f"tools[{i}] needs a name")
        function = {k: spec[k] for k in ("name", "description", "parameters") if spec.get(k) is not None}
        converted.append({"type": "function", "function": function})
    return converted or None


def chat_request(body: Mapping[str, object], previous: list[dict[str, Any]] | None) -> ChatRequest:
    """The chat request a Responses body asks for (``previous``: the previous response's conversation)."""
    history = [*(previous or []), *input_messages(body.get("input"))]
    if not history:
        raise BadParam("input", "input must hold at least one item")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadParam("instructions", "instructions must be a string")
    system = [{"role": "system", "content": instructions}] if instructions else []
    params: dict[str, object] = {
        key: body[key] for key in ("temperature", "top_p", "top_k", "seed") if body.get(key) is not None
    }
    if body.get("max_output_tokens") is not None:
        params["max_tokens"] = body["max_output_tokens"]
    tools = chat_tools(body.get("tools"))
    if tools:
        params["tools"] = tools
    return ChatRequest(messages=[*system, *history], history=history, params=params)


def _logprobs(choice: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = cast(Mapping[str, Any], choice.get("logprobs") or {}).get("content") or []
    return [
        {"token": e["token"], "logprob": e["logprob"], "bytes": e.get("bytes") or [], "top_logprobs": []}
        for e in content
    ]


def response_object(
    chat: Mapping[str, Any], body: Mapping[str, object], response_id: str | None = None
) -> dict[str, Any]:
    """A Responses ``response`` from a served chat completion (its first choice) and the request."""
    choice = cast(Mapping[str, Any], chat["choices"][0])
    message = cast(Mapping[str, Any], choice.get("message") or {})
    text = message.get("content") or ""
    calls = cast(Sequence[Mapping[str, Any]], message.get("tool_calls") or [])
    output: list[dict[str, Any]] = []
    if text or not calls:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": _logprobs(choice)}
        item_id = f"msg_{uuid.uuid4().hex}"
        output.append({"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": [part]})
    for call in calls:
        function = cast(Mapping[str, Any], call.get("function") or {})
        output.append(
            {
                "id": f"fc_{uuid.uuid4().hex}",
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
                "status": "completed",
            }
        )
    incomplete = choice.get("finish_reason") == "length"
    usage = cast(Mapping[str, int], chat.get("usage") or {})
    return {
        "id": response_id or f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": float(chat.get("created") or time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "model": chat.get("model"),
        "output": output,
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": True,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "store": body.get("store") is not False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.get("total_tokens", 0),
        },
        # Beyond OpenAI's fields, as on chat completions: the exact tokens and the policy version.
        "prompt_token_ids": chat.get("prompt_token_ids"),
        "token_ids": choice.get("token_ids"),
        "system_fingerprint": chat.get("system_fingerprint"),
    }


def reply_message(chat: Mapping[str, Any]) -> dict[str, Any]:
    """The served reply as the chat message a later turn's history holds."""
    message = cast(Mapping[str, Any], cast(Mapping[str, Any], chat["choices"][0]).get("message") or {})
    reply: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        reply["tool_calls"] = [
            {"id": c.get("id"), "type": "function", "function": dict(c.get("function") or {})}
            for c in message["tool_calls"]
        ]
    return reply


def _event(kind: str, sequence: int, **fields: object) -> str:
    payload = {"type": kind, "sequence_number": sequence, **fields}
    return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


def response_events(response: Mapping[str, Any]) -> Iterator[str]:
    """A complete response as OpenAI's streaming events, from ``response.created`` to ``response.completed``.

    The whole reply is sampled before the first event (as for streamed chat completions): each output
    item comes as added, one delta, done; the last event carries the full response (``response.incomplete``
    when the reply ran out of ``max_output_tokens``).
    """
    sequence = iter(range(1 << 30))
    started = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield _event("response.created", next(sequence), response=started)
    yield _event("response.in_progress", next(sequence), response=started)
    for index, item in enumerate(cast(Sequence[Mapping[str, Any]], response["output"])):
        if item["type"] == "message":
            yield _event(
                "response.output_item.added",
                next(sequence),
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            for part_index, part in enumerate(cast(Sequence[Mapping[str, Any]], item["content"])):
                place = {"item_id": item["id"], "output_index": index, "content_index": part_index}
                empty = {**part, "text": "", "logprobs": []}
                yield _event("response.content_part.added", next(sequence), **place, part=empty)
                if part["text"]:
                    delta = {"delta": part["text"], "logprobs": part["logprobs"]}
                    yield _event("response.output_text.delta", next(sequence), **place, **delta)
                done = {"text": part["text"], "logprobs": part["logprobs"]}
                yield _event("response.output_text.done", next(sequence), **place, **done)
                yield _event("response.content_part.done", next(sequence), **place, part=part)
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            yield _event("response.output_item.added", next(sequence), output_index=index, item=added)
            place = {"item_id": item["id"], "output_index": index}
            yield _event("response.function_call_arguments.delta", next(sequence), **place, delta=item["arguments"])
            done = {"arguments": item["arguments"], "name": item["name"]}
            yield _event("response.function_call_arguments.done", next(sequence), **place, **done)
        yield _event("response.output_item.done", next(sequence), output_index=index, item=item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield _event(final, next(sequence), response=response)
