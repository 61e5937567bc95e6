"""Concurrent identical sample requests share one sampler call, and every caller gets its own samples."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.tinker.coalescing import CoalescingSampler
from ports.policy import SampledSequence, SamplingParams, StopReason

PARAMS = SamplingParams(max_tokens=4, temperature=1.0)


class NumberingSampler:
    """Each sample is a distinct sequence (a running number after the prompt); records every call."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.calls: list[tuple[tuple[int, ...], SamplingParams, int]] = []
        self.delay_s = delay_s
        self.fail = fail
        self._next = 0

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        self.calls.append((tuple(prompt_tokens), params, num_samples))
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("the server is gone")
        out = []
        for _ in range(num_samples):
            self._next += 1
            out.append(SampledSequence((*prompt_tokens, self._next), (-0.5,), StopReason.STOP))
        return out


async def test_a_groups_identical_requests_become_one_call_and_each_gets_its_own_sample() -> None:
    inner = NumberingSampler()
    sampler = CoalescingSampler(inner, window_s=0.05)

    replies = await asyncio.gather(*(sampler.sample([1, 2, 3], PARAMS) for _ in range(8)))

    assert inner.calls == [((1, 2, 3), PARAMS, 8)]
    assert [r[0].tokens for r in replies] == [(1, 2, 3, n) for n in range(1, 9)]  # in arrival order
    assert (sampler.counts.requests, sampler.counts.calls) == (8, 1)


async def test_other_prompts_or_parameters_never_share_a_call() -> None:
    inner = NumberingSampler()
    sampler = CoalescingSampler(inner, window_s=0.05)
    greedy = SamplingParams(max_tokens=4, temperature=0.0)

    await asyncio.gather(
        sampler.sample([1], PARAMS),
        sampler.sample([2], PARAMS),
        sampler.sample([1], greedy),
        sampler.sample([1], PARAMS),
    )

    assert Counter(inner.calls) == Counter([((1,), PARAMS, 2), ((2,), PARAMS, 1), ((1,), greedy, 1)])


@pytest.mark.parametrize(
    ("window_s", "params"),
    [(0.0, PARAMS), (0.05, SamplingParams(max_tokens=4, seed=7))],
    ids=["window-0", "seeded"],
)
async def test_seeded_requests_and_a_zero_window_go_alone(window_s: float, params: SamplingParams) -> None:
    inner = NumberingSampler()
    sampler = CoalescingSampler(inner, window_s=window_s)

    await asyncio.gather(*(sampler.sample([1], params) for _ in range(3)))

    assert inner.calls == [((1,), params, 1)] * 3


async def test_past_max_samples_a_second_call_starts() -> None:
    inner = NumberingSampler()
    sampler = CoalescingSampler(inner, window_s=0.05, max_samples=4)

    replies = await asyncio.gather(*(sampler.sample([1], PARAMS, 3) for _ in range(3)))

    assert [n for _, _, n in inner.calls] == [3, 3, 3]
    assert sorted(len(r) for r in replies) == [3, 3, 3]


async def test_the_samplers_error_reaches_every_caller() -> None:
    sampler = CoalescingSampler(NumberingSampler(fail=True), window_s=0.05)

    outcomes = await asyncio.gather(*(sampler.sample([1], PARAMS) for _ in range(3)), return_exceptions=True)

    assert [str(o) for o in outcomes] == ["the server is gone"] * 3


async def test_a_caller_that_gives_up_leaves_the_shared_call_to_the_others() -> None:
    inner = NumberingSampler(delay_s=0.2)
    sampler = CoalescingSampler(inner, window_s=0.05)

    impatient = asyncio.wait_for(sampler.sample([1], PARAMS), 0.1)
    patient = sampler.sample([1], PARAMS)
    outcomes = await asyncio.gather(impatient, patient, return_exceptions=True)

    assert isinstance(outcomes[0], TimeoutError)
    assert isinstance(outcomes[1], list) and [s.tokens[0] for s in outcomes[1]] == [1]
    assert inner.calls == [((1,), PARAMS, 2)]


requests = st.lists(
    st.tuples(st.sampled_from([(1,), (2,), (1, 2)]), st.sampled_from([0.0, 1.0]), st.integers(1, 3)),
    min_size=1,
    max_size=24,
)


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(1, 8))
def test_every_caller_gets_exactly_its_samples_and_nothing_is_lost_or_shared(
    batch: list[tuple[tuple[int, ...], float, int]], max_samples: int
) -> None:
    inner = NumberingSampler()
    sampler = CoalescingSampler(inner, window_s=0.001, max_samples=max_samples)

    async def all_of_them() -> list[Sequence[SampledSequence]]:
        return await asyncio.gather(
            *(sampler.sample(prompt, SamplingParams(max_tokens=4, temperature=t), n) for prompt, t, n in batch)
        )

    replies = asyncio.run(all_of_them())

    for (prompt, _t, n), reply in zip(batch, replies, strict=True):
        assert len(reply) == n and all(s.tokens[:-1] == prompt for s in reply)
    served = [s.tokens for reply in replies for s in reply]
    assert len(set(served)) == len(served) == sum(n for _, _, n in inner.calls)  # each sample to one caller
    assert all(n <= max(max_samples, 3) for _, _, n in inner.calls)
    assert len(inner.calls) <= len(batch)
