"""Concurrent requests for the same prompt and sampling parameters, sent to a sampler as one call.

A GRPO group sends its first prompt ``group_size`` times within milliseconds, one rollout each, and a
remote sampler (Tinker) costs the trainer process a whole request per call: the SDK's request models,
the HTTP round trip, the retrieval of the result. ``CoalescingSampler`` holds a request for
``window_s``, joins every request for the same prompt and parameters that arrives meanwhile, asks the
inner sampler once for all their samples and hands each caller its own slice, in arrival order. The
k samples of one call are independent draws, as k calls of one sample are. Requests with a ``seed`` go
through alone: a seed promises the same sample for the same request, which a shared call cannot keep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from ports.policy import SampledSequence, Sampler, SamplingParams

DEFAULT_WINDOW_S = 0.02
"""Long enough for a group's requests to meet, short against a remote sample (hundreds of milliseconds)."""


_Key = tuple[int, tuple[int, ...], SamplingParams]
"""The event loop's id, the prompt and the parameters: what requests must share to share a call."""


@dataclass(slots=True)
class _Call:
    done: asyncio.Future[list[SampledSequence]]
    num_samples: int = 0


@dataclass(slots=True)
class CoalescingCounts:
    """How many requests came in and how many calls reached the inner sampler."""

    requests: int = 0
    calls: int = 0


@dataclass(slots=True)
class CoalescingSampler:
    """A ``Sampler`` over ``inner`` that sends concurrent identical requests as one call.

    Calls come from one event loop at a time (the endpoint's owner loop); requests on different loops
    never share a call. A caller that gives up (a timeout) leaves the shared call to the others.
    """

    inner: Sampler
    window_s: float = DEFAULT_WINDOW_S
    max_samples: int = 64
    """Most samples in one call; more requests start another."""
    counts: CoalescingCounts = field(default_factory=CoalescingCounts)
    _open: dict[_Key, _Call] = field(default_factory=dict)
    _sending: set[asyncio.Task[None]] = field(default_factory=set)

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        self.counts.requests += 1
        if params.seed is not None or self.window_s <= 0 or num_samples >= self.max_samples:
            self.counts.calls += 1
            return await self.inner.sample(prompt_tokens, params, num_samples)
        loop = asyncio.get_running_loop()
        key: _Key = (id(loop), tuple(prompt_tokens), params)
        call = self._open.get(key)
        if call is None or call.num_samples + num_samples > self.max_samples:
            call = _Call(done=loop.create_future())
            call.done.add_done_callback(_retrieve)
            self._open[key] = call
            loop.call_later(self.window_s, self._send, key, call)
        first = call.num_samples
        call.num_samples += num_samples
        sequences = await asyncio.shield(call.done)
        return sequences[first : first + num_samples]

    def _send(self, key: _Key, call: _Call) -> None:
        if self._open.get(key) is call:
            del self._open[key]
        self.counts.calls += 1
        _loop_id, prompt, params = key
        task = asyncio.ensure_future(self._call(list(prompt), params, call))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _call(self, prompt: list[int], params: SamplingParams, call: _Call) -> None:
        try:
            sequences = list(await self.inner.sample(prompt, params, call.num_samples))
        except asyncio.CancelledError:
            call.done.cancel()
            raise
        except Exception as error:  # every caller of the shared call gets the sampler's own error
            call.done.set_exception(error)
            return
        if len(sequences) != call.num_samples:
            call.done.set_exception(
                RuntimeError(f"the sampler returned {len(sequences)} sequences for {call.num_samples} samples")
            )
            return
        call.done.set_result(sequences)


def _retrieve(done: asyncio.Future[list[SampledSequence]]) -> None:
    """Mark an error as seen: every caller may have given up before it came."""
    if not done.cancelled():
        done.exception()
