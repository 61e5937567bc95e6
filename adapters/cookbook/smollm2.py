"""SmolLM2-Instruct's chat format as a tinker-cookbook renderer (``policy.renderer_name=smollm2``).

SmolLM2's chat template is ChatML, which the cookbook's ``qwen3_instruct`` renderer writes token for token
once a chat has a system message, except for a message whose text starts with spaces (the template tokenizes
the newline after the role with it) and a ``tool`` message (the template writes it under its own role, as it
is). The template also opens a chat that has no system message with its own default one. This renderer does all
three, so the tokens the endpoint serves and trains on are the ones
``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` gives. The template ignores
``tool_calls``; an assistant message that has them keeps Qwen's ``<tool_call>`` blocks, so a call the model
made stays in its history.
"""

from __future__ import annotations

from typing import Any

import tinker
import torch
from tinker_cookbook.renderers import (
    Message,
    RenderContext,
    Renderer,
    Role,
    TrainOnWhat,
    register_renderer,
)
from tinker_cookbook.renderers.base import RenderedMessage
from tinker_cookbook.renderers.qwen3 import Qwen3InstructRenderer
from tinker_cookbook.tokenizer_utils import Tokenizer

SMOLLM2_RENDERER = "smollm2"
SMOLLM2_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system message SmolLM2-Instruct's chat template writes when a chat has none."""


class SmolLM2Renderer(Qwen3InstructRenderer):
    """``qwen3_instruct`` plus SmolLM2's default system message, with prompt messages (``tool`` ones too) written
    as the template writes them."""

    def _with_default_system(self, messages: list[Message]) -> list[Message]:
        """The template's ``loop.first and messages[0]['role'] != 'system'``: an empty chat gets none."""
        if not messages or messages[0]["role"] == "system":
            return messages
        return [Message(role="system", content=SMOLLM2_SYSTEM_PROMPT), *messages]

    def render_message(self, message: Message, ctx: RenderContext) -> RenderedMessage:
        """A prompt message's text is tokenized with the newline after its role, as the template's one string is:
        content that starts with spaces merges its first with that newline (``"\\n "`` is one token). An
        assistant message keeps ``qwen3_instruct``'s split: its reply starts after the generation prompt's newline.
        """
        content = message["content"]
        if message["role"] == "assistant" or not isinstance(content, str):
            return super().render_message(message, ctx)
        newline = "\n" if ctx.idx > 0 else ""
        encode = self.tokenizer.encode
        header = encode(f"{newline}<|im_start|>{message['role']}", add_special_tokens=False)
        text = encode(f"\n{content}", add_special_tokens=False, split_special_tokens=True)
        return RenderedMessage(
            header=tinker.EncodedTextChunk(tokens=header),
            output=[tinker.EncodedTextChunk(tokens=text), tinker.EncodedTextChunk(tokens=[self._end_message_token])],
        )

    def build_generation_prompt(
        self, messages: list[Message], role: Role = "assistant", prefill: str | None = None
    ) -> tinker.ModelInput:
        return super().build_generation_prompt(self._with_default_system(messages), role=role, prefill=prefill)

    def build_supervised_example(
        self, messages: list[Message], train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    ) -> tuple[tinker.ModelInput, torch.Tensor]:
        return super().build_supervised_example(self._with_default_system(messages), train_on_what=train_on_what)


def _factory(tokenizer: Tokenizer, _image_processor: Any = None) -> Renderer:
    return SmolLM2Renderer(tokenizer)


def register_smollm2_renderer() -> None:
    """Make ``get_renderer("smollm2", tokenizer)`` build a ``SmolLM2Renderer`` (the cookbook's own registry)."""
    register_renderer(SMOLLM2_RENDERER, _factory)
