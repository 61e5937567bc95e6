"""Policy endpoint overhead: the lean Starlette server vs Agent-lightning's LiteLLM proxy.

Same workload for both servers, in one run: N chat completions at a fixed concurrency from one
shared ``openai.AsyncOpenAI`` client, each under its own rollout's URL (so each is attributed and
recorded in the store), against an instant scripted sampler and an ``InMemoryLightningStore``.
Prints requests/s, the median latency and this process's CPU time per request (client, server
and store together: ``time.process_time`` counts every thread), and the lean/LiteLLM ratios.

    .venv/bin/python bench/bench_endpoint.py [--requests 300] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
import openai
from tinker_cookbook import renderers
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.endpoint import EndpointConfig, PolicyEndpoint
from adapters.local import build_tiny_model
from ports.policy import SampledSequence, SamplingParams, StopReason

Server = Literal["lean", "litellm"]
WARM_UP = 16


class InstantSampler:
    """Always the same short reply, with no delay: the bench measures the endpoint, not a model."""

    def __init__(self, renderer: renderers.Renderer) -> None:
        tokenizer = renderer.tokenizer
        im_end = cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>"))
        tokens = (*cast(list[int], tokenizer.encode("I'm 42.", add_special_tokens=False)), im_end)
        self._reply = SampledSequence(tokens, tuple(-0.1 for _ in tokens), StopReason.STOP)

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        return [self._reply] * num_samples


@dataclass(frozen=True, slots=True)
class Result:
    server: Server
    requests: int
    wall_s: float
    cpu_s: float
    latencies_ms: tuple[float, ...]
    recorded: int

    @property
    def per_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests


async def run_server(server: Server, renderer: renderers.Renderer, n_requests: int, concurrency: int) -> Result:
    store = agl.InMemoryLightningStore(thread_safe=True)
    config = EndpointConfig(server=server)
    async with PolicyEndpoint(store, renderer, config, sampler=InstantSampler(renderer)) as endpoint:
        resource = endpoint.as_resource()
        urls: list[str] = []
        for _ in range(WARM_UP + n_requests):
            attempted = await store.start_rollout(input={"question": "?"})
            urls.append(resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id))
        client = openai.AsyncOpenAI(base_url=endpoint.endpoint, api_key="unused", max_retries=0)
        latencies_ms: list[float] = []

        async def one(url: str) -> None:
            started = time.perf_counter()
            reply = await client.with_options(base_url=url).chat.completions.create(
                model="policy", messages=[{"role": "user", "content": "What is 6 times 7?"}]
            )
            latencies_ms.append(1000 * (time.perf_counter() - started))
            assert reply.choices[0].message.content == "I'm 42."

        async def worker(queue: asyncio.Queue[str]) -> None:
            while not queue.empty():
                await one(queue.get_nowait())

        async def run(batch: list[str]) -> None:
            queue: asyncio.Queue[str] = asyncio.Queue()
            for url in batch:
                queue.put_nowait(url)
            await asyncio.gather(*(worker(queue) for _ in range(concurrency)))

        await run(urls[:WARM_UP])
        latencies_ms.clear()
        endpoint.take_metrics()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        await run(urls[WARM_UP:])
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        recorded = int(endpoint.take_metrics().get("endpoint/capture/recorded", 0))
        await client.close()
    return Result(server, n_requests, wall, cpu, tuple(latencies_ms), recorded)


async def main(n_requests: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        renderer = get_renderer("qwen3_instruct", get_tokenizer(str(build_tiny_model(Path(tmp) / "model"))))
    results = [await run_server(server, renderer, n_requests, concurrency) for server in ("lean", "litellm")]
    print(f"{n_requests} attributed chat requests, concurrency {concurrency}, one shared AsyncOpenAI client")
    for r in results:
        print(
            f"{r.server:>8}: {r.per_s:7.1f} req/s  p50 {r.p50_ms:6.2f} ms  "
            f"CPU {r.cpu_ms_per_request:6.2f} ms/request  (recorded {r.recorded}/{r.requests})"
        )
    lean, proxied = results
    cpu_ratio = lean.cpu_ms_per_request / proxied.cpu_ms_per_request
    print(
        f"   ratio: lean/litellm throughput x{lean.per_s / proxied.per_s:.2f}, "
        f"p50 x{lean.p50_ms / proxied.p50_ms:.2f}, CPU/request x{cpu_ratio:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args.requests, args.concurrency))
