"""A deterministic policy for the endpoint tests: replies chosen by what the prompt says.

Each reply is one token per character, then ``<|im_end|>``, with known logprobs, so a reply that
was re-tokenised between turns would show. ``n > 1`` gets distinct replies; a gate (an
``asyncio.Event`` per first reply) holds a request until the test releases it, which forces the
order in which parallel requests finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import cast

from tinker_cookbook import renderers

from ports.policy import SampledSequence, SamplingParams, StopReason


class PromptSampler:
    def __init__(self, renderer: renderers.Renderer, replies: Callable[[str], Sequence[str]]) -> None:
        """``replies(prompt_text)``: the replies to give, the i-th for the i-th of ``n`` samples."""
        self.tokenizer = renderer.tokenizer
        self.im_end = cast(int, self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.replies = replies
        self.gates: dict[str, asyncio.Event] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.prompts: list[tuple[int, ...]] = []
        self.params: list[SamplingParams] = []
        self.outputs: list[list[SampledSequence]] = []

    def tokens(self, reply: str, end: bool = True) -> tuple[int, ...]:
        pieces = (t for ch in reply for t in self.tokenizer.encode(ch, add_special_tokens=False))
        return (*pieces, self.im_end) if end else tuple(pieces)

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
