"""Deterministic policies for the endpoint tests: each reply one token per character, then ``<|im_end|>``.

Never the canonical tokens, so a reply re-tokenised between turns would show; the logprobs are known.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

from tinker_cookbook import renderers

from ports.policy import SampledSequence, SamplingParams, StopReason

TOOL_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
"""A Qwen3 tool call of ``add(2, 3)``, as a policy writes it."""


def im_end_of(tokenizer: Any) -> int:
    return cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>"))


def char_tokens(tokenizer: Any, reply: str, end: bool = True) -> tuple[int, ...]:
    """``reply`` one token per character, then ``<|im_end|>`` when ``end``."""
    pieces = tuple(t for ch in reply for t in tokenizer.encode(ch, add_special_tokens=False))
    return (*pieces, im_end_of(tokenizer)) if end else pieces


class CharSampler:
    """Replies ``replies[i]`` on its i-th call (round and round), token k with logprob ``-step * (k + 1)``;
    records each call's prompt, parameters, output and event loop; waits ``delay_s`` before replying."""

    def __init__(
        self, renderer: renderers.Renderer, replies: Sequence[str], *, delay_s: float = 0.0, step: float = 0.01
    ) -> None:
        self.im_end = im_end_of(renderer.tokenizer)
        self.replies = [char_tokens(renderer.tokenizer, reply) for reply in replies]
        self.step = step
        self.delay_s = delay_s
        self.prompts: list[tuple[int, ...]] = []
        self.params: list[SamplingParams] = []
        self.outputs: list[SampledSequence] = []
        self.loops: list[asyncio.AbstractEventLoop] = []

    @property
    def tokens(self) -> tuple[int, ...]:
        """The first reply's tokens (all of them for a sampler of one reply)."""
        return self.replies[0]

    @property
    def logprobs(self) -> tuple[float, ...]:
        return self._logprobs(self.replies[0])

    def _logprobs(self, tokens: Sequence[int]) -> tuple[float, ...]:
        return tuple(-self.step * (k + 1) for k in range(len(tokens)))

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        self.loops.append(asyncio.get_running_loop())
        await asyncio.sleep(self.delay_s)
        tokens = self.replies[len(self.prompts) % len(self.replies)]
        self.prompts.append(tuple(prompt_tokens))
        self.params.append(params)
        sequence = SampledSequence(tokens, self._logprobs(tokens), StopReason.STOP)
        self.outputs.append(sequence)
        return [sequence] * num_samples


class PromptSampler:
    """Replies chosen by what the prompt says. ``n > 1`` gets distinct replies; a gate (an
    ``asyncio.Event`` per first reply) holds a request until the test releases it, which forces the
    order in which parallel requests finish."""

    def __init__(self, renderer: renderers.Renderer, replies: Callable[[str], Sequence[str]]) -> None:
        """``replies(prompt_text)``: the replies to give, the i-th for the i-th of ``n`` samples."""
        self.tokenizer = renderer.tokenizer
        self.im_end = im_end_of(self.tokenizer)
        self.replies = replies
        self.gates: dict[str, asyncio.Event] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.prompts: list[tuple[int, ...]] = []
        self.params: list[SamplingParams] = []
        self.outputs: list[list[SampledSequence]] = []

    def tokens(self, reply: str, end: bool = True) -> tuple[int, ...]:
        return char_tokens(self.tokenizer, reply, end)

    def gate(self, first_reply: str) -> tuple[asyncio.Event, asyncio.Event]:
        """(arrived, release) events for the request whose first reply is ``first_reply``."""
        self.arrived[first_reply], self.gates[first_reply] = asyncio.Event(), asyncio.Event()
        return self.arrived[first_reply], self.gates[first_reply]

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        replies = list(self.replies(self.tokenizer.decode(list(prompt_tokens))))
        if replies[0] in self.gates:
            self.arrived[replies[0]].set()
            await self.gates[replies[0]].wait()
        else:
            await asyncio.sleep(0)
        out = []
        for i in range(num_samples):
            reply, end = replies[i % len(replies)], True
            for stop in params.stop_strings:  # as a backend stops: after the stop string, which it keeps
                if stop in reply:
                    reply, end = reply[: reply.index(stop) + len(stop)], False
            tokens = self.tokens(reply, end)
            logprobs = tuple(-0.01 * (i + 1) - 0.001 * k for k in range(len(tokens)))
            out.append(SampledSequence(tokens, logprobs, StopReason.STOP))
        self.prompts.append(tuple(prompt_tokens))
        self.params.append(params)
        self.outputs.append(out)
        return out
