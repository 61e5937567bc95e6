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

4. Quick-start: the README's quick-start agent shape at full concurrency (``bench.bench_agents:quickstart``):
   batches of 64 rollouts that each wait ``--quickstart-wait`` (0.5 s: a tool, a remote service) and then
   make one short policy call through an ``AsyncOpenAI`` client built inside the rollout, on ONE
   ``ConcurrentRunner`` process of 64, instant sampler; best and median batch wall time of
   ``--quickstart-batches`` (5) against the ideal (the wait). Rows, each with a runner process of its own,
   side by side: ``per-client`` (each client builds its TLS context, as before ``adapters/runner/tls.py``:
   ``AGL_TINKER_SHARED_TLS=0``), ``shared`` (the default) and ``one-client`` (``chat_once``: one client per
   process, for reference). ``--profile-runner``: cProfile of the runner's event loop over the timed batches
   (``bench/profiled_runner.py``), top functions printed per row.

    .venv/bin/python bench/bench_latency.py [--rollouts 256] [--latency 0.5] [--memory-latency 2.0]
        [--stock-runners 8] [--scaled-runners 8] [--scaled-rollouts 2048] [--quickstart-batches 5]
        [--quickstart-wait 0.5] [--quickstart-rows per-client,shared,one-client] [--profile-runner]
        [--only wall,memory,stock,scaled,quickstart]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import os
import pstats
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
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
from adapters.runner.tls import SWITCH_ENV
from app.usecases.rollouts import RolloutOptions, run_rollouts
from bench.bench_throughput import (
    AGENT_REFERENCE,
    ConstantSampler,
    check,
    policy_endpoint,
    requests,
    runner_cpu_s,
    served_store,
    tiny_renderer,
    warm_up,
)
from bench.profiled_runner import ENV as PROFILE_ENV
from bench.profiled_runner import wrapper_script
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


QUICKSTART_ROWS = {
    "per-client": ("bench.bench_agents:quickstart", False, "client per rollout, TLS context per client (before)"),
    "shared": ("bench.bench_agents:quickstart", True, "client per rollout, TLS context shared (default)"),
    "one-client": (AGENT_REFERENCE, True, "one client per process (chat_once, reference)"),
}


@dataclass(slots=True)
class QuickstartRow:
    label: str
    walls: list[float]
    trainer_cpu_s: float
    runner_cpu_s: float
    rollouts: int

    def line(self, wait_s: float) -> str:
        return (
            f"quickstart, {self.label}: {len(self.walls)} batches of {self.rollouts // len(self.walls)} x {wait_s} s "
            f"wait + 1 call: best {min(self.walls):.2f} s, median {statistics.median(self.walls):.2f} s (ideal "
            f"{wait_s:.2f} s); trainer CPU {1000 * self.trainer_cpu_s / self.rollouts:.2f} ms/rollout, runner CPU "
            f"{1000 * self.runner_cpu_s / self.rollouts:.2f} ms/rollout"
        )


@contextlib.contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name]`` set to ``value`` (None: unset) inside, what it was after (runner processes inherit it)."""
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def signal_runners() -> None:
    """``SIGUSR1`` to this process's profiled runner processes (``bench/profiled_runner.py``)."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "profiled_runner.py" in " ".join(child.cmdline()):
                child.send_signal(signal.SIGUSR1)


def print_profile(prefix: str, label: str) -> None:
    deadline = time.monotonic() + 30
    files: list[Path] = []
    while not files and time.monotonic() < deadline:
        time.sleep(0.2)
        files = sorted(Path(prefix).parent.glob(Path(prefix).name + ".*"))
    if not files:
        print(f"--- {label}: no runner profile written")
        return
    time.sleep(0.5)  # let the dump finish
    stats = pstats.Stats(*map(str, files))
    print(f"--- {label}: runner event loop over the timed batches, top 15 by own time")
    stats.sort_stats("tottime").print_stats(15)
    print(f"--- {label}: top 25 by cumulative time")
    stats.sort_stats("cumulative").print_stats(25)
    for f in files:
        f.unlink()


async def quickstart(
    renderer: renderers.Renderer, row: str, batches: int, wait_s: float, profile_dir: Path | None
) -> QuickstartRow:
    """Part 4, one row: a runner process of 64 running ``batches`` batches of 64 rollouts, each timed."""
    agent, shared_tls, label = QUICKSTART_ROWS[row]
    prefix = str(profile_dir / f"runner-{row}") if profile_dir is not None else None
    python = str(wrapper_script(profile_dir)) if profile_dir is not None else None
    walls: list[float] = []
    trainer_cpu = runner_cpu = 0.0
    with (
        environment(SWITCH_ENV, None if shared_tls else "0"),
        environment(PROFILE_ENV, prefix),
    ):
        async with (
            served_store() as (store, url, token),
            policy_endpoint(store, renderer, "lean") as (_, rid),
        ):
            with RunnerProcesses(agent, url, 1, concurrency=RUNNER_CONCURRENCY, token=token, python=python) as runners:
                runners.supervise()
                ready = await warm_up(store, rid, 1)
                print(f"quickstart, {label}: runner ready after {ready:.1f} s (not timed)", flush=True)
                if python is not None:
                    signal_runners()
                for i in range(batches):
                    first = 1000 * (i + 1)
                    cpu0, runner0, started = time.process_time(), runner_cpu_s(), time.perf_counter()
                    results = await run_rollouts(
                        requests(RUNNER_CONCURRENCY, rid, start=first, sleep_s=wait_s),
                        store=AglRolloutStore(store),
                        triplets=AglTripletSource(EndpointTraceToTriplet()),
                        options=RolloutOptions(concurrency=RUNNER_CONCURRENCY, rollout_timeout_s=120, runners=runners),
                    )
                    walls.append(time.perf_counter() - started)
                    trainer_cpu += time.process_time() - cpu0
                    runner_cpu += runner_cpu_s() - runner0
                    check(results, RUNNER_CONCURRENCY, first)
                if python is not None:
                    signal_runners()
                if runners.alive != 1:
                    raise RuntimeError(f"the runner process died: {runners.describe()}")
    result = QuickstartRow(label, walls, trainer_cpu, runner_cpu, batches * RUNNER_CONCURRENCY)
    print(result.line(wait_s) + f" [batches: {' '.join(f'{w:.2f}' for w in walls)}]", flush=True)
    if prefix is not None:
        print_profile(prefix, label)
    return result


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
        if "quickstart" in only:
            rows = [
                await quickstart(
                    renderer,
                    row,
                    args.quickstart_batches,
                    args.quickstart_wait,
                    Path(tmp) if args.profile_runner else None,
                )
                for row in args.quickstart_rows.split(",")
            ]
            print("quickstart, side by side (target: best <= 1.0 s with a client per rollout):")
            for quick in rows:
                print("  " + quick.line(args.quickstart_wait), flush=True)
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
    parser.add_argument("--quickstart-batches", type=int, default=5, help="timed batches per row, part 4")
    parser.add_argument("--quickstart-wait", type=float, default=0.5, help="each rollout's wait before its call")
    parser.add_argument("--quickstart-rows", default="per-client,shared,one-client", help="rows of part 4")
    parser.add_argument("--profile-runner", action="store_true", help="cProfile the runner's loop, part 4")
    parser.add_argument(
        "--only",
        default="wall,memory,scaled,stock,quickstart",
        help="parts to run: wall, memory, scaled, stock, quickstart",
    )
    asyncio.run(main(parser.parse_args()))
