"""Latency-bound rollouts: batch wall time vs the ideal, and memory of concurrent vs per-process runners.

The agent is ``bench.bench_agents:chat_once`` (one chat call, then its reward); the latency is in
the scripted sampler behind the real policy endpoint (``ConstantSampler(delay_s=...)`` of
``bench_throughput``): each LLM call takes ``delay_s`` inside the endpoint, so the agent's HTTP
request is open for that long, as with a real policy. Store: ``InMemoryLightningStore`` served by
``LightningStoreServer`` on 127.0.0.1, runners attached over HTTP, batches driven by
``run_rollouts`` with ``EndpointTraceToTriplet`` reconstruction (every rollout checked: succeeded,
one triplet, its reward).

1. Wall time: ``--rollouts`` (256) rollouts at loop concurrency 64 on ONE ``ConcurrentRunner``
   process (concurrency 64), 0.5 s per LLM call, endpoint ``server="lean"``; printed against the
   ideal ``rollouts / 64 x 0.5 s`` (target: ratio <= 1.2).
2. Memory: 64 rollouts of a 2 s LLM call in flight at once in that one concurrent process, vs
   ``--stock-runners`` (8) stock ``LitAgentRunner`` processes (one rollout each, AgentOps tracer)
   with 8 in flight (endpoint ``server="lean"`` here too: the LiteLLM proxy's start-up CPU slows
   the start of 8 runner processes on 2 cores, and the runners' memory does not depend on it). RSS (and USS, memory
   not shared with other processes) is sampled every 0.1 s while every rollout is inside its LLM
   call; the peak of the runner processes' sum is printed, with the trainer's own RSS apart. The
   per-process stock figure is extrapolated linearly to 64 processes (labelled as such: 64 real
   processes do not fit this machine's 2 cores).

3. Scaled: ``--scaled-rollouts`` (2048) rollouts on ``--scaled-runners`` (8) ``ConcurrentRunner``
   processes of 64 each, loop concurrency 512, each LLM call taking a latency drawn uniformly from
   1-5 s (seeded): the wall time against the ideal (the latencies drawn, each started the moment one of
   the 512 slots frees, as a runner, store and trainer that cost nothing would), the
   most calls in flight at once, and the trainer's CPU per rollout and share of one core: a trainer
   that keeps up finishes near the ideal with most of its core to spare.

    .venv/bin/python bench/bench_latency.py [--rollouts 256] [--latency 0.5] [--memory-latency 2.0]
        [--stock-runners 8] [--scaled-runners 8] [--scaled-rollouts 2048] [--only wall,memory,stock,scaled]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
import psutil
from tinker_cookbook import renderers

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from bench.bench_throughput import (
    AGENT_REFERENCE,
    ConstantSampler,
    check,
    policy_endpoint,
    requests,
    served_store,
    tiny_renderer,
    warm_up,
)
from ports.policy import SampledSequence, SamplingParams, StopReason

RUNNER_CONCURRENCY = 64
MiB = 1024 * 1024


class CountingSampler(ConstantSampler):
    """``ConstantSampler`` that counts the calls inside it right now, and the most at once."""

    def __init__(self, renderer: renderers.Renderer, delay_s: float) -> None:
        super().__init__(renderer, delay_s)
        self.in_flight = 0
        self.peak = 0

    def latency_s(self) -> float:
        """How long the next call takes."""
        return self.delay_s

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s())
            return [SampledSequence(self.reply, tuple(-0.1 for _ in self.reply), StopReason.STOP)] * num_samples
        finally:
            self.in_flight -= 1


class SpreadSampler(CountingSampler):
    """Each call takes a latency drawn uniformly from ``[low_s, high_s]`` (seeded); ``drawn`` keeps them in order."""

    def __init__(self, renderer: renderers.Renderer, low_s: float, high_s: float, seed: int = 0) -> None:
        super().__init__(renderer, 0.0)
        self._random = random.Random(seed)
        self._low_s, self._high_s = low_s, high_s
        self.drawn: list[float] = []

    def latency_s(self) -> float:
        delay_s = self._random.uniform(self._low_s, self._high_s)
        self.drawn.append(delay_s)
        return delay_s

    def ideal_s(self, slots: int) -> float:
        """The makespan of the calls as drawn on ``slots`` slots with no other cost: each call starts the moment
        a slot frees (a runner, store and trainer that cost nothing would finish then)."""
        free_at = [0.0] * slots
        for delay_s in self.drawn:
            heapq.heappush(free_at, heapq.heappop(free_at) + delay_s)
        return max(free_at)


def runner_processes() -> list[psutil.Process]:
    """This process's runner children (spawned workers, not multiprocessing's resource tracker)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
    return found


@dataclass(slots=True)
class Memory:
    processes: int = 0
    runners_rss: int = 0
    runners_uss: int = 0
    trainer_rss: int = 0
    samples: int = 0


def sample_memory(peak: Memory) -> None:
    procs = runner_processes()
    rss = uss = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            rss, uss = rss + info.rss, uss + info.uss
    if rss > peak.runners_rss:
        peak.processes, peak.runners_rss, peak.runners_uss = len(procs), rss, uss
    peak.trainer_rss = max(peak.trainer_rss, psutil.Process().memory_info().rss)
    peak.samples += 1


async def timed(
    store: agl.InMemoryLightningStore, resources_id: str, n: int, concurrency: int, runners: RunnerProcesses
) -> float:
    first = 1000
    started = time.perf_counter()
    results = await run_rollouts(
        requests(n, resources_id, start=first),
        store=AglRolloutStore(store),
        triplets=AglTripletSource(EndpointTraceToTriplet()),
        options=RolloutOptions(concurrency=concurrency, rollout_timeout_s=120, runners=runners),
    )
    wall = time.perf_counter() - started
    check(results, n, first)
    return wall


async def in_flight_memory(
    store: agl.InMemoryLightningStore,
    endpoint: PolicyEndpoint,
    renderer: renderers.Renderer,
    resources_id: str,
    n: int,
    delay_s: float,
    runners: RunnerProcesses,
) -> Memory:
    """Run ``n`` rollouts of a ``delay_s`` LLM call at once; peak memory while all ``n`` are in their call."""
    sampler = CountingSampler(renderer, delay_s)
    endpoint.set_sampler(sampler)
    peak = Memory()
    batch = asyncio.create_task(timed(store, resources_id, n, n, runners))
    while not batch.done():
        if sampler.in_flight >= n:
            sample_memory(peak)
        await asyncio.sleep(0.1)
    await batch
    if peak.samples == 0:
        raise RuntimeError(f"never had {n} LLM calls in flight at once")
    return peak


async def scaled(renderer: renderers.Renderer, n_processes: int, n: int) -> None:
    """Part 3: ``n`` rollouts of a 1-5 s LLM call on ``n_processes`` runner processes, all slots busy."""
    slots = n_processes * RUNNER_CONCURRENCY
    async with (
        served_store() as (store, url, token),
        policy_endpoint(store, renderer, "lean") as (endpoint, rid),
    ):
        with RunnerProcesses(AGENT_REFERENCE, url, n_processes, concurrency=RUNNER_CONCURRENCY, token=token) as runners:
            runners.supervise()
            ready = await warm_up(store, rid, n_processes)
            print(
                f"{n_processes} ConcurrentRunner({RUNNER_CONCURRENCY}) processes ready after {ready:.1f} s (not timed)"
            )
            sampler = SpreadSampler(renderer, 1.0, 5.0)
            endpoint.set_sampler(sampler)
            cpu0 = time.process_time()
            wall = await timed(store, rid, n, slots, runners)
            cpu = time.process_time() - cpu0
            if runners.alive != n_processes:
                raise RuntimeError(f"runner processes died: {runners.describe()}")
    ideal = sampler.ideal_s(slots)
    print(
        f"scaled: {n} rollouts, 1-5 s per LLM call (mean {statistics.mean(sampler.drawn):.2f} s), {n_processes} runner "
        f"processes x {RUNNER_CONCURRENCY}, loop concurrency {slots}: {wall:.2f} s vs ideal {ideal:.2f} s, ratio "
        f"{wall / ideal:.2f}; {n / wall:.1f} rollouts/s; at most {sampler.peak} LLM calls in flight; trainer CPU "
        f"{cpu:.2f} s ({1000 * cpu / n:.2f} ms/rollout, {100 * cpu / wall:.0f}% of one core)",
        flush=True,
    )


def mib(value: float) -> str:
    return f"{value / MiB:7.0f} MiB"


async def main(args: argparse.Namespace) -> None:
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        renderer = tiny_renderer(Path(tmp))
        if only & {"wall", "memory"}:
            async with (
                served_store() as (store, url, token),
                policy_endpoint(store, renderer, "lean") as (endpoint, rid),
            ):
                with RunnerProcesses(AGENT_REFERENCE, url, 1, concurrency=RUNNER_CONCURRENCY, token=token) as runners:
                    runners.supervise()
                    ready = await warm_up(store, rid, 1)
                    print(f"one ConcurrentRunner({RUNNER_CONCURRENCY}) process ready after {ready:.1f} s (not timed)")
                    if "wall" in only:
                        endpoint.set_sampler(ConstantSampler(renderer, args.latency))
                        cpu0 = time.process_time()
                        wall = await timed(store, rid, args.rollouts, RUNNER_CONCURRENCY, runners)
                        cpu = time.process_time() - cpu0
                        ideal = args.rollouts / RUNNER_CONCURRENCY * args.latency
                        print(
                            f"wall: {args.rollouts} rollouts, {args.latency} s per LLM call (in the sampler), loop and "
                            f"runner concurrency {RUNNER_CONCURRENCY}: {wall:.2f} s vs ideal {ideal:.2f} s, "
                            f"ratio {wall / ideal:.2f} (target <= 1.2); trainer CPU {cpu:.2f} s "
                            f"({1000 * cpu / args.rollouts:.1f} ms/rollout)",
                            flush=True,
                        )
                    if "memory" in only:
                        peak = await in_flight_memory(
                            store, endpoint, renderer, rid, RUNNER_CONCURRENCY, args.memory_latency, runners
                        )
                        print(
                            f"memory, ours: {RUNNER_CONCURRENCY} rollouts in flight "
                            f"({args.memory_latency} s LLM call) in "
                            f"{peak.processes} ConcurrentRunner process: RSS {mib(peak.runners_rss)} "
                            f"(USS {mib(peak.runners_uss)}; target < 1024 MiB); trainer RSS {mib(peak.trainer_rss)} "
                            f"[{peak.samples} samples]",
                            flush=True,
                        )
        if "scaled" in only:
            await scaled(renderer, args.scaled_runners, args.scaled_rollouts)
        if "stock" in only:
            n = args.stock_runners
            # The lean endpoint here too: the runner side is the stock one, and the LiteLLM proxy's start-up
            # CPU would slow the runners' start-up on a 2-core machine (the trainer's RSS is printed apart).
            async with (
                served_store() as (store, url, token),
                policy_endpoint(store, renderer, "lean") as (endpoint, rid),
            ):
                with RunnerProcesses(AGENT_REFERENCE, url, n, concurrency=None, token=token) as runners:
                    runners.supervise()
                    started = time.perf_counter()
                    while len((await store.query_workers()).items) < n:  # each registers once imported
                        await asyncio.sleep(0.5)
                    print(f"{n} stock runner processes registered after {time.perf_counter() - started:.1f} s")
                    ready = await warm_up(store, rid, n)
                    print(f"{n} stock LitAgentRunner processes ready after {ready:.1f} s (not timed)", flush=True)
                    peak = await in_flight_memory(store, endpoint, renderer, rid, n, args.memory_latency, runners)
            per_rss, per_uss = peak.runners_rss / peak.processes, peak.runners_uss / peak.processes
            print(
                f"memory, stock: {n} rollouts in flight ({args.memory_latency} s LLM call) in {peak.processes} "
                f"LitAgentRunner processes: RSS {mib(peak.runners_rss)} (USS {mib(peak.runners_uss)}), per process "
                f"RSS {mib(per_rss)} (USS {mib(per_uss)}); trainer RSS {mib(peak.trainer_rss)} (lean endpoint) "
                f"[{peak.samples} samples]"
            )
            print(
                f"memory, stock, EXTRAPOLATED linearly to {RUNNER_CONCURRENCY} processes (not measured): "
                f"RSS {mib(per_rss * RUNNER_CONCURRENCY)}, USS {mib(per_uss * RUNNER_CONCURRENCY)}"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per LLM call, part 1")
    parser.add_argument("--memory-latency", type=float, default=2.0, help="seconds per LLM call, part 2")
    parser.add_argument("--stock-runners", type=int, default=8)
    parser.add_argument("--scaled-runners", type=int, default=8, help="runner processes, part 3")
    parser.add_argument("--scaled-rollouts", type=int, default=2048, help="rollouts, part 3")
    parser.add_argument("--only", default="wall,memory,scaled,stock", help="parts to run: wall, memory, scaled, stock")
    asyncio.run(main(parser.parse_args()))
