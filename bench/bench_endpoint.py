"""The policy endpoint's CPU per request: lean server vs Agent-lightning's LiteLLM proxy, and over Tinker.

The same workload for every row, in one run: requests shaped as GRPO groups (``--group-size`` requests
of one prompt at once, each under its own rollout's URL, so each is attributed and recorded in the
store; a new prompt per group), ``--concurrency`` groups in flight, from one shared
``openai.AsyncOpenAI`` client in a process of its own. CPU per request is the endpoint process's
(``time.process_time``: the server, the store it records into and the sampler's client, every
thread), split by thread; the client's is not in it.

Rows: ``lean`` and ``litellm`` over an instant scripted sampler (the endpoint's own cost); with
``--tinker``, ``lean`` over the tinker SDK's sampler on SkyRL's Tinker-API server (the project's
tiny model on this machine's CPU; ``adapters.tinker.server.skyrl``), each request its own SDK call
(``coalesce_window_s=0``) vs a group's requests coalesced into one call (the default,
``adapters.tinker.coalescing``), alternating ``--repeat`` times, with the ratio of their medians.

    .venv/bin/python bench/bench_endpoint.py [--requests 320] [--group-size 8] [--concurrency 2] [--tinker]
        [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("TINKER_API_KEY", "tml-local-bench")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
import openai
import psutil
from tinker_cookbook import renderers
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from adapters.local import build_tiny_model
from adapters.tinker.backend import TinkerConfig, TinkerTrainer
from adapters.tinker.coalescing import CoalescingSampler
from adapters.tinker.server.skyrl import SkyrlServer, install
from domain.sampling import SamplingDefaults
from ports.policy import SampledSequence, Sampler, SamplingParams, StopReason

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


def thread_cpu_s() -> dict[str, float]:
    """User+system CPU seconds of each thread of this process, by name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    return {names.get(t.id, f"native {t.id}"): t.user_time + t.system_time for t in psutil.Process().threads()}


def group_load(
    urls: Sequence[str],
    endpoint: str,
    group_size: int,
    concurrency: int,
    go: multiprocessing.synchronize.Event,
    out: multiprocessing.Queue[list[float] | None],
) -> None:
    """The client process: ``urls`` in groups of ``group_size`` (one prompt a group), ``concurrency`` groups at once."""

    async def run() -> list[float]:
        client = openai.AsyncOpenAI(base_url=endpoint, api_key="unused", max_retries=0)
        latencies_ms: list[float] = []
        groups = [urls[i : i + group_size] for i in range(0, len(urls), group_size)]
        queue: asyncio.Queue[tuple[int, Sequence[str]]] = asyncio.Queue()
        for item in enumerate(groups):
            queue.put_nowait(item)

        async def one(url: str, question: str) -> None:
            started = time.perf_counter()
            reply = await client.with_options(base_url=url).chat.completions.create(
                model="policy", messages=[{"role": "user", "content": question}], max_tokens=8
            )
            latencies_ms.append(1000 * (time.perf_counter() - started))
            assert reply.choices and reply.choices[0].finish_reason in ("stop", "length"), reply

        async def worker() -> None:
            while not queue.empty():
                index, group = queue.get_nowait()
                question = f"What is {index} times 7? Answer with the number only."
                await asyncio.gather(*(one(url, question) for url in group))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await client.close()
        return latencies_ms

    out.put(None)  # imported: ready
    go.wait()
    out.put(asyncio.run(run()))


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    requests: int
    wall_s: float
    cpu_s: float
    latencies_ms: tuple[float, ...]
    recorded: int
    threads_ms: dict[str, float]
    sampler_calls: int | None = None

    @property
    def per_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests


@contextlib.contextmanager
def client_process(
    urls: Sequence[str], endpoint: str, group_size: int, concurrency: int
) -> Iterator[Callable[[], Awaitable[list[float]]]]:
    """A started client process, its imports done; calling what this yields sends the load and waits for it."""
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[list[float] | None] = context.Queue()
    go = context.Event()
    child = context.Process(
        target=group_load, args=(list(urls), endpoint, group_size, concurrency, go, out), daemon=True
    )
    child.start()
    try:
        if out.get(True, 120) is not None:
            raise RuntimeError("the client process did not start")

        async def send() -> list[float]:
            go.set()
            latencies = await asyncio.to_thread(out.get, True, 600)
            assert latencies is not None
            return latencies

        yield send
    finally:
        child.join(30)
        child.kill()


async def run_row(
    name: str,
    server: Server,
    renderer: renderers.Renderer,
    sampler: Sampler,
    n_requests: int,
    group_size: int,
    concurrency: int,
) -> Result:
    store = agl.InMemoryLightningStore(thread_safe=True)
    config = EndpointConfig(server=server, defaults=SamplingDefaults(max_tokens=8))
    async with PolicyEndpoint(store, renderer, config, sampler=sampler) as endpoint:
        resource = endpoint.as_resource()
        urls: list[str] = []
        for _ in range(WARM_UP + n_requests):
            attempted = await store.start_rollout(input={"question": "?"})
            urls.append(resource.get_base_url(attempted.rollout_id, attempted.attempt.attempt_id))
        with client_process(urls[:WARM_UP], endpoint.endpoint, group_size, concurrency) as send:
            await send()
        with client_process(urls[WARM_UP:], endpoint.endpoint, group_size, concurrency) as send:
            endpoint.take_metrics()
            calls0 = sampler.counts.calls if isinstance(sampler, CoalescingSampler) else 0
            threads0 = thread_cpu_s()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            latencies_ms = await send()
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        threads = {t: 1000 * (c - threads0.get(t, 0.0)) / n_requests for t, c in thread_cpu_s().items()}
        recorded = int(endpoint.take_metrics().get("endpoint/capture/recorded", 0))
        calls = sampler.counts.calls - calls0 if isinstance(sampler, CoalescingSampler) else None
    return Result(name, n_requests, wall, cpu, tuple(latencies_ms), recorded, threads, calls)


def report(r: Result) -> str:
    calls = f", {r.sampler_calls} sampler calls" if r.sampler_calls is not None else ""
    busy = sorted(((t, ms) for t, ms in r.threads_ms.items() if ms >= 0.05), key=lambda kv: -kv[1])
    return (
        f"{r.name:<34} {r.per_s:7.1f} req/s  p50 {r.p50_ms:7.2f} ms  CPU {r.cpu_ms_per_request:5.2f} ms/request"
        f"  (recorded {r.recorded}/{r.requests}{calls})\n"
        f"{'':<34} by thread: " + ", ".join(f"{t} {ms:.2f}" for t, ms in busy)
    )


async def tinker_rows(
    renderer: renderers.Renderer, model: Path, args: argparse.Namespace, workdir: Path
) -> tuple[list[Result], list[Result]]:
    """Rows over the tinker SDK on SkyRL, alternating ``--repeat`` times: each request alone, then coalesced."""
    install()
    alone: list[Result] = []
    coalesced: list[Result] = []
    with SkyrlServer(model, workdir / "server") as skyrl:
        for _ in range(args.repeat):
            for name, window_s, rows in (
                ("lean + tinker, each request alone", 0.0, alone),
                ("lean + tinker, groups coalesced", 0.02, coalesced),
            ):
                trainer = await TinkerTrainer.connect(
                    TinkerConfig(
                        base_model=str(model), train_unembed=False, base_url=skyrl.url, coalesce_window_s=window_s
                    )
                )
                sampler = await trainer.sampler(name)
                await sampler.sample([1, 2, 3], SamplingParams(max_tokens=2))  # the SDK's session, joined once
                row = await run_row(name, "lean", renderer, sampler, args.requests, args.group_size, args.concurrency)
                print(report(row), flush=True)
                rows.append(row)
                await trainer.close()
    return alone, coalesced


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    model = build_tiny_model(workdir / "model")
    renderer = get_renderer("qwen3_instruct", get_tokenizer(str(model)))
    print(
        f"{args.requests} attributed chat requests in groups of {args.group_size} (one prompt a group), "
        f"{args.concurrency} groups at once, from a client process",
        flush=True,
    )
    results = []
    for server in ("lean", "litellm"):
        row = await run_row(
            server, server, renderer, InstantSampler(renderer), args.requests, args.group_size, args.concurrency
        )
        print(report(row), flush=True)
        results.append(row)
    lean, proxied = results
    print(
        f"lean/litellm: throughput x{lean.per_s / proxied.per_s:.2f}, p50 x{lean.p50_ms / proxied.p50_ms:.2f}, "
        f"CPU/request x{lean.cpu_ms_per_request / proxied.cpu_ms_per_request:.2f}"
    )
    if args.tinker:
        alone, coalesced = await tinker_rows(renderer, model, args, workdir)

        def median(rows: list[Result], value: Callable[[Result], float]) -> float:
            return statistics.median(value(r) for r in rows)

        cpu = median(coalesced, lambda r: r.cpu_ms_per_request) / median(alone, lambda r: r.cpu_ms_per_request)
        p50 = median(coalesced, lambda r: r.p50_ms) / median(alone, lambda r: r.p50_ms)
        rate = median(coalesced, lambda r: r.per_s) / median(alone, lambda r: r.per_s)
        print(
            f"tinker, coalesced/alone (medians of {args.repeat} rows each): CPU/request x{cpu:.2f}, p50 x{p50:.2f}, "
            f"throughput x{rate:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=2, help="groups in flight")
    parser.add_argument("--tinker", action="store_true", help="also the rows over SkyRL's Tinker-API server")
    parser.add_argument("--repeat", type=int, default=3, help="times each Tinker row runs, alternating")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args))
