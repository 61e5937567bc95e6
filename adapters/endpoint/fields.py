"""Which OpenAI request fields the lean endpoint honours, and the 400 that names each one it refuses.

No field is silently ignored. A field is either honoured (it changes what is sampled or returned),
accepted as information only (``user``, ``metadata``, ``store``, ... which OpenAI itself uses for
bookkeeping and which change nothing a policy samples), or refused with OpenAI's error JSON whose
``param`` names it. Values that would ask for what the sampler cannot do (alternatives per token,
penalties, biases, constrained decoding, forced tool choice) are refused; the neutral value of
each (``0``, ``{}``, ``"auto"``, ``{"type": "text"}``) is accepted. Unknown fields are refused as
OpenAI refuses them (``Unrecognized request argument supplied``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from adapters.endpoint.provider import BadParam

INFORMATIONAL = frozenset(
    {"user", "metadata", "store", "service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier"}
)
"""Accepted and echoed where OpenAI echoes them; they change nothing the policy samples."""


def _absent_or(*neutral: object) -> Callable[[object], bool]:
    return lambda value: value is None or any(value == n for n in neutral)


def _stream_options(value: object) -> bool:
    return value is None or (isinstance(value, Mapping) and set(value) <= {"include_usage", "include_obfuscation"})


def _function_tools(value: object) -> bool:
    return value is None or (
        isinstance(value, list) and all(isinstance(t, Mapping) and t.get("type") == "function" for t in value)
    )


_TOOL_CHOICE = "the policy samples freely and cannot be forced to call (or skip) a tool: send 'auto' or leave it out"
_REFUSED_WHY: dict[str, str] = {
    "tool_choice": _TOOL_CHOICE,
    "parallel_tool_calls": "the policy may call several tools in one reply; false cannot be enforced",
    "top_logprobs": "the sampler returns the sampled token's logprob only (alternatives are not computed)",
    "response_format": "constrained decoding is not served; only {'type': 'text'}",
    "text": "constrained decoding and verbosity are not served; only {'format': {'type': 'text'}}",
    "logit_bias": "the sampler takes no per-token bias",
    "frequency_penalty": "the sampler applies no penalties; 0 only",
    "presence_penalty": "the sampler applies no penalties; 0 only",
    "modalities": "only text is served",
    "include": "only 'message.output_text.logprobs' (always included) is served",
    "truncation": "a prompt over the policy's limit is refused, never truncated: 'disabled' only",
    "reasoning": "reasoning settings are not served",
    "background": "background responses are not served",
    "conversation": "conversations are not kept: send the items in input (or previous_response_id within a rollout)",
    "prompt": "stored prompt templates are not served",
    "max_tool_calls": "the number of tool calls cannot be bounded",
    "context_management": "context management is not served",
    "reasoning_effort": "reasoning settings are not served",
    "verbosity": "verbosity is not served",
    "audio": "only text is served",
    "prediction": "predicted outputs are not served",
    "web_search_options": "web search is not served",
    "functions": "the deprecated functions field is not served: declare tools",
    "function_call": "the deprecated function_call field is not served: declare tools",
    "stream_options": "only include_usage and include_obfuscation are served",
    "tools": "function tools only",
}

_COMMON: dict[str, Callable[[object], bool]] = {
    "tool_choice": _absent_or("auto"),
    "parallel_tool_calls": _absent_or(True),
    "top_logprobs": _absent_or(0),
    "stream_options": _stream_options,
}

CHAT_FIELDS: dict[str, Callable[[object], bool] | None] = {
    # Honoured (checked where they are used) or informational: None.
    **dict.fromkeys(
        [
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "n",
            "stop",
            "stream",
            "logprobs",
            "return_token_ids",
            *INFORMATIONAL,
        ]
    ),
    **_COMMON,
    "tools": _function_tools,
    "response_format": _absent_or({"type": "text"}),
    "logit_bias": _absent_or({}),
    "frequency_penalty": _absent_or(0),
    "presence_penalty": _absent_or(0),
    "modalities": _absent_or(["text"]),
    "reasoning_effort": _absent_or(),
    "verbosity": _absent_or(),
    "audio": _absent_or(),
    "prediction": _absent_or(),
    "web_search_options": _absent_or(),
    "functions": _absent_or(),
    "function_call": _absent_or(),
}
"""Every ``POST /chat/completions`` field, with the check its value must pass (None: any valid value)."""

RESPONSES_FIELDS: dict[str, Callable[[object], bool] | None] = {
    **dict.fromkeys(
        [
            "model",
            "input",
            "instructions",
            "tools",
            "max_output_tokens",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "stream",
            "previous_response_id",
            *INFORMATIONAL,
        ]
    ),
    **_COMMON,
    "include": lambda v: v is None or (isinstance(v, list) and set(v) <= {"message.output_text.logprobs"}),
    "text": lambda v: (
        v is None or (isinstance(v, Mapping) and set(v) <= {"format"} and v.get("format") in (None, {"type": "text"}))
    ),
    "truncation": _absent_or("disabled"),
    "reasoning": _absent_or({}),
    "background": _absent_or(False),
    "conversation": _absent_or(),
    "prompt": _absent_or(),
    "max_tool_calls": _absent_or(),
    "context_management": _absent_or(),
}
"""Every ``POST /responses`` field, with the check its value must pass (None: any valid value)."""


def check_fields(body: Mapping[str, object], fields: Mapping[str, Callable[[object], bool] | None]) -> None:
    """Refuse the first field the endpoint would otherwise ignore: unknown, or a value it cannot honour."""
    for name, value in body.items():
        if name not in fields:
            raise BadParam(name, f"Unrecognized request argument supplied: {name}")
        check = fields[name]
        if check is not None and not check(value):
            raise BadParam(name, f"{name}={value!r} is not served: {_REFUSED_WHY.get(name, 'unsupported value')}")
