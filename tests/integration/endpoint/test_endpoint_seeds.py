"""A rollout samples the same tokens for the same run seed, whatever order its and other rollouts' requests
reach the endpoint in: each request's seed comes from its rollout's seed, not from arrival order.

The real endpoint over HTTP, the real ``LocalSampler`` on the tiny model (untrained: its replies vary with
the seed) and real store rollouts, whose ids differ from run to run as in training.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import agentlightning as agl
import openai
import pytest
from tinker_cookbook import renderers

from adapters.local import LocalSampler
from domain.sampling import derive_seed
from tests.support.endpoints import policy_endpoint

pytestmark = pytest.mark.slow

N_ROLLOUTS = 6
Tokens = tuple[tuple[int, ...], ...]
"""The tokens sampled on each of a rollout's turns."""


async def turn(client: openai.AsyncOpenAI, history: list[dict[str, str]], **extra: object) -> tuple[int, ...]:
    reply = await client.chat.completions.create(model="policy", messages=history, **extra)  # type: ignore[call-overload]
    (choice,) = reply.choices
    history += [{"role": "assistant", "content": choice.message.content or ""}, {"role": "user", "content": "more"}]
    return tuple((choice.model_extra or {})["token_ids"])


async def sample_rollouts(
    tiny_model: Path, renderer: renderers.Renderer, run_seed: int, order: Sequence[int], *, concurrent: bool
) -> list[Tokens]:
    """Two turns of each of ``N_ROLLOUTS`` rollouts; their requests sent in ``order``, all at once or one by one."""
    store = agl.InMemoryLightningStore(thread_safe=True)
    sampler = LocalSampler.from_pretrained(tiny_model)
    async with policy_endpoint(store, renderer, max_tokens=8, sampler=sampler) as endpoint:
        resource = endpoint.as_resource()
        assert isinstance(resource, agl.ProxyLLM)
        clients, histories = [], []
        seeds = {}
        for i in range(N_ROLLOUTS):
            attempted = await store.start_rollout(input={"word": "seven"})
            seeds[attempted.rollout_id] = derive_seed(run_seed, "train", 0, 0, i)
            base = resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id)
            clients.append(openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0))
            histories.append([{"role": "user", "content": "seven"}])
        endpoint.seed_rollouts(seeds)
        sampled: list[list[tuple[int, ...]]] = [[] for _ in range(N_ROLLOUTS)]

        async def one_turn(i: int) -> None:
            sampled[i].append(await turn(clients[i], histories[i]))

        for _ in range(2):
            if concurrent:
                await asyncio.gather(*(one_turn(i) for i in order))
            else:
                for i in order:
                    await one_turn(i)
        return [tuple(turns) for turns in sampled]


async def test_each_rollout_samples_the_same_tokens_in_any_arrival_order(
    tiny_model: Path, renderer: renderers.Renderer
) -> None:
    together = await sample_rollouts(tiny_model, renderer, 0, range(N_ROLLOUTS), concurrent=True)
    shuffled = random.Random(1).sample(range(N_ROLLOUTS), N_ROLLOUTS)
    one_by_one = await sample_rollouts(tiny_model, renderer, 0, shuffled, concurrent=False)
    other_seed = await sample_rollouts(tiny_model, renderer, 1, range(N_ROLLOUTS), concurrent=True)

    assert one_by_one == together
    assert len(set(together)) == N_ROLLOUTS, "each rollout samples from its own seed"
    assert all(len(turns) == 2 for turns in together)
    assert other_seed != together


async def test_a_request_seed_wins_over_the_rollouts(tiny_model: Path, renderer: renderers.Renderer) -> None:
    store = agl.InMemoryLightningStore(thread_safe=True)
    sampler = LocalSampler.from_pretrained(tiny_model)
    async with policy_endpoint(store, renderer, max_tokens=8, sampler=sampler) as endpoint:
        resource = endpoint.as_resource()
        assert isinstance(resource, agl.ProxyLLM)
        replies = []
        for rollout_seed in (1, 2):
            attempted = await store.start_rollout(input={"word": "seven"})
            endpoint.seed_rollouts({attempted.rollout_id: rollout_seed})
            base = resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id)
            client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
            replies.append(await turn(client, [{"role": "user", "content": "seven"}], seed=123))
        assert replies[0] == replies[1]
