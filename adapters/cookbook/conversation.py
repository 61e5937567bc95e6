"""OpenAI chat messages and function tools as a renderer's conversation.

One conversion for what the policy is served and what a warm start trains on: the endpoint renders a
request's prompt from it and ``training.chat_datum`` a warm-start chat, so a chat in OpenAI's
fine-tuning format trains on exactly the tokens the same request would be served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from tinker_cookbook import renderers
from tinker_cookbook.third_party.openai_compat import openai_messages_to_tinker, openai_tools_to_tinker


def openai_conversation(
    renderer: renderers.Renderer, messages: Sequence[Mapping[str, object]], tools: object
) -> list[renderers.Message]:
    """The messages as the renderer's, with any function ``tools`` declared in the system message its own way."""
    conversation = openai_messages_to_tinker([dict(m) for m in messages])
    if isinstance(tools, list) and tools:
        system_prompt = ""
        if conversation and conversation[0]["role"] == "system":
            content = conversation[0].get("content")
            system_prompt = content if isinstance(content, str) else ""
            conversation = conversation[1:]
        tool_specs = openai_tools_to_tinker(cast(list[dict[str, Any]], tools))
        conversation = renderer.create_conversation_prefix_with_tools(tool_specs, system_prompt) + conversation
    return conversation
