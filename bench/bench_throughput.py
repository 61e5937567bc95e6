"""Rollout throughput: this project's concurrent runners vs Agent-lightning's stock path vs the store alone.

A trivial agent (``bench.bench_agents:chat_once``: one chat call through a shared
``openai.AsyncOpenAI`` client, then its reward) against an instant scripted sampler behind the real
policy endpoint. Each row drives its rollouts with ``run_rollouts`` over a fresh
``InMemoryLightningStore(thread_safe=True)`` served on 127.0.0.1 as ``app.launch`` serves it
(``adapters.agl.server``; runners attach over HTTP; the loop and the endpoint use the store in this
process; each rollout is forgotten once rebuilt, unless ``--keep-rollouts``), rebuilds every
trajectory with ``EndpointTraceToTriplet`` and checks that every rollout succeeded with exactly one
triplet carrying its reward:

- (a) this project: ``RunnerProcesses(n=--runners, concurrency=--runner-concurrency)``
  (``ConcurrentRunner``) and the endpoint with ``server="lean"``;
- (b) Agent-lightning's stock path: ``RunnerProcesses(n=--stock-runners, concurrency=None)``
  (``LitAgentRunner``, one rollout per process, AgentOps tracer), ``server="litellm"``
  (``LLMProxy``) and Agent-lightning's own store server, keeping every rollout;
- (c) the store's own limit: no agent and no endpoint. One process stands in for a runner
  (``dequeue_many_rollouts`` under its worker id, up to ``--runner-concurrency`` at once), stores
  the spans one rollout of (a) left in the store (copied from (a), fresh ids) and marks it succeeded
  in one request (``adapters.agl.finish``), the calls ``ConcurrentRunner`` makes; the same loop
  detects completion and rebuilds the triplets;
- (d) as (a), with the store served from a process of its own (``adapters.agl.store_process``, as
  ``store_process=true`` runs it): the loop and the endpoint reach it over HTTP with the run's token.

Runner processes are warmed up (each has finished a rollout with an LLM call) before timing.
CPU seconds per rollout: this (trainer) process's ``time.process_time`` and the runner processes'
user+system time (psutil), over the timed batch only.

    .venv/bin/python bench/bench_throughput.py [--rollouts 512] [--stock-rollouts 128] [--runners 1]
        [--runner-concurrency 64] [--stock-runners 4] [--concurrency 128] [--only a,b,c,d] [--profile]
        [--keep-rollouts]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import multiprocessing
import os
import pstats
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
import psutil
from tinker_cookbook import renderers
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.agl.auth import TokenStoreClient
from adapters.agl.finish import FinishingClient
from adapters.agl.server import project_store_server
from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.agl.store_process import StoreProcess
from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.local import build_tiny_model
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from domain.groups import RolloutResult
from domain.sampling import SamplingDefaults
from ports.policy import SampledSequence, SamplingParams, StopReason
from ports.rollout_store import RolloutRequest

AGENT_REFERENCE = "bench.bench_agents:chat_once"
RUNNER_STARTUP_TIMEOUT_S = 300.0
PROFILE = False
STORE_PIDS: set[int] = set()
"""Store processes of row (d): their CPU is the store's, not the runners'."""
FORGET = True
"""As ``agl-tinker train`` runs by default: the store forgets each rollout once it is rebuilt."""


class ConstantSampler:
    """A scripted policy: replies "ok" to every prompt after ``delay_s`` (0: at once)."""

    def __init__(self, renderer: renderers.Renderer, delay_s: float = 0.0) -> None:
        tokenizer = renderer.tokenizer
        self.reply = (
            *tokenizer.encode("ok", add_special_tokens=False),
            cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>")),
        )
        self.delay_s = delay_s

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return [SampledSequence(self.reply, tuple(-0.1 for _ in self.reply), StopReason.STOP)] * num_samples


def tiny_renderer(directory: Path) -> renderers.Renderer:
    """The qwen3 chat renderer over the tiny local model's tokenizer (no download)."""
    return get_renderer("qwen3_instruct", get_tokenizer(str(build_tiny_model(directory / "model"))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def served_store(
    process: bool = False, stock: bool = False
) -> AsyncIterator[tuple[agl.LightningStore, str, str | None]]:
    """A fresh in-memory store served on a free loopback port, as ``agl-tinker train`` serves it: (store, url, token).

    In a thread of this process (the store itself is returned), or with ``process`` in a child process
    (``adapters.agl.store_process``, as ``store_process=true`` runs it; a client with the token is returned).
    ``stock``: Agent-lightning's own server, without the project's routes and middleware (row (b)).
    """
    if not process:
        store = agl.InMemoryLightningStore(thread_safe=True)
        server_args: dict[str, Any] = {"host": "127.0.0.1", "port": free_port()}
        if stock:
            server = agl.LightningStoreServer(store, **server_args)
        else:
            server = project_store_server(store, None, **server_args)
        await server.start()
        try:
            yield store, server.endpoint, None
        finally:
            await server.stop()
        return
    token = uuid.uuid4().hex
    child = StoreProcess(free_port(), token).spawn()
    STORE_PIDS.add(cast(int, child.pid))
    try:
        await asyncio.to_thread(child.wait_ready)
        client = TokenStoreClient(child.url, token)
        try:
            yield client, child.url, token
        finally:
            await client.close()
    finally:
        child.stop()


@contextlib.asynccontextmanager
async def policy_endpoint(
    store: agl.LightningStore, renderer: renderers.Renderer, server: str, delay_s: float = 0.0
) -> AsyncIterator[tuple[PolicyEndpoint, str]]:
    """The real endpoint (``server`` "lean" or "litellm") over a scripted sampler: (endpoint, resources_id)."""
    config = EndpointConfig(defaults=SamplingDefaults(max_tokens=8), server=server)  # type: ignore[arg-type]
    async with PolicyEndpoint(store, renderer, config) as endpoint:
        endpoint.set_sampler(ConstantSampler(renderer, delay_s))
        update = await store.add_resources({"main_llm": endpoint.as_resource()})
        yield endpoint, update.resources_id


def requests(n: int, resources_id: str | None, start: int = 0, **extra: float) -> list[RolloutRequest]:
    return [
        RolloutRequest(
            task={"n": start + i, "reward": float(start + i), **extra}, mode="train", resources_id=resources_id
        )
        for i in range(n)
    ]


async def warm_up(store: agl.InMemoryLightningStore, resources_id: str | None, n_processes: int) -> float:
    """Until every runner process has finished a rollout (each a 1 s sleep and an LLM call); seconds it took.

    Attempts carry the runner's worker id (``Worker-<i>``, one per process): warm-up batches run
    until ``n_processes`` distinct ids have finished one.
    """
    started = time.perf_counter()
    seen: set[str] = set()
    while len(seen) < n_processes:
        if time.perf_counter() - started > RUNNER_STARTUP_TIMEOUT_S:
            raise TimeoutError(f"only {len(seen)} of {n_processes} runner processes became ready")
        results = await run_rollouts(
            requests(2 * n_processes, resources_id, sleep_s=1.0),
            store=AglRolloutStore(store),
            triplets=AglTripletSource(EndpointTraceToTriplet()),
            options=RolloutOptions(concurrency=2 * n_processes, rollout_timeout_s=RUNNER_STARTUP_TIMEOUT_S),
        )
        for result in results:
            if result.status == "succeeded":
                seen.update(a.worker_id or "" for a in await store.query_attempts(result.rollout_id))
        statuses = sorted(r.status for r in results)
        print(f"  warm-up {time.perf_counter() - started:.0f} s: {statuses}, ready {sorted(seen)}", flush=True)
    return time.perf_counter() - started


def check(results: Sequence[RolloutResult], n: int, first: int | None) -> None:
    """Every rollout succeeded with one triplet with a reward (the task's, unless ``first`` is None)."""
    bad = [
        (i, r.status, r.trajectory.n_triplets, [t.reward for t in r.trajectory.transitions])
        for i, r in enumerate(results)
        if r.status != "succeeded"
        or r.trajectory.n_triplets != 1
        or len(r.trajectory.transitions) != 1
        or r.trajectory.final_reward_missing
        or (first is not None and r.trajectory.transitions[0].reward != float(first + i))
    ]
    if len(results) != n or bad:
        raise RuntimeError(f"{len(bad)} of {len(results)}/{n} rollouts are wrong, e.g. {bad[:5]}")


def runner_cpu_s(store: bool = False) -> float:
    """User+system CPU seconds of this process's runner processes (else of its store process), so far."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        if (child.pid in STORE_PIDS) != store:
            continue
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def thread_cpu_s() -> dict[str, float]:
    """User+system CPU seconds of each thread of this process, by name (native id when unknown)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    return {f"{names.get(t.id, '?')} [{t.id}]": t.user_time + t.system_time for t in psutil.Process().threads()}


@dataclass(slots=True)
class Row:
    name: str
    rollouts: int
    wall_s: float
    trainer_cpu_s: float
    runner_cpu_s: float

    @property
    def rate(self) -> float:
        return self.rollouts / self.wall_s


async def timed_batch(
    name: str,
    store: agl.InMemoryLightningStore,
    resources_id: str | None,
    n: int,
    concurrency: int,
    runners: RunnerProcesses | None,
    *,
    check_rewards: bool = True,
    forget: bool = True,
) -> tuple[Row, list[RolloutResult]]:
    first = 1000
    batch = requests(n, resources_id, start=first)
    profiler = cProfile.Profile() if PROFILE else None
    threads0 = thread_cpu_s()
    cpu0, runner0, store0, started = time.process_time(), runner_cpu_s(), runner_cpu_s(store=True), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    results = await run_rollouts(
        batch,
        store=AglRolloutStore(store),
        triplets=AglTripletSource(EndpointTraceToTriplet()),
        options=RolloutOptions(concurrency=concurrency, rollout_timeout_s=120, runners=runners, forget_finished=FORGET),
    )
    wall = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
        stats = pstats.Stats(profiler)
        print(f"--- {name}: trainer main thread, top 30 by own time")
        stats.sort_stats("tottime").print_stats(30)
        print(f"--- {name}: top 40 by cumulative time")
        stats.sort_stats("cumulative").print_stats(40)
    row = Row(name, n, wall, time.process_time() - cpu0, runner_cpu_s() - runner0)
    if STORE_PIDS:
        print(f"{name}: store process CPU {1000 * (runner_cpu_s(store=True) - store0) / n:.2f} ms/rollout")
    threads1 = thread_cpu_s()
    busy = sorted(((t, cpu - threads0.get(t, 0.0)) for t, cpu in threads1.items()), key=lambda kv: -kv[1])
    print(
        f"{name}: trainer CPU by thread: "
        + ", ".join(f"{t.split(' [')[0]} {1000 * cpu / n:.1f} ms/r" for t, cpu in busy if cpu > 0.01),
        flush=True,
    )
    check(results, n, first if check_rewards else None)
    print(
        f"{name}: {n} rollouts in {wall:.2f} s, {row.rate:.1f} rollouts/s, trainer CPU "
        f"{1000 * row.trainer_cpu_s / n:.2f} ms/rollout, runner CPU {1000 * row.runner_cpu_s / n:.2f} ms/rollout",
        flush=True,
    )
    return row, results


async def with_runners(
    name: str,
    renderer: renderers.Renderer,
    server: str,
    n_processes: int,
    runner_concurrency: int | None,
    n: int,
    concurrency: int,
    store_process: bool = False,
    forget: bool = True,
) -> tuple[Row, list[dict[str, Any]]]:
    """Rows (a), (b) and (d); also the spans one rollout left in the store (what (c) replays)."""
    async with (
        served_store(store_process, stock=runner_concurrency is None) as (store, url, token),
        policy_endpoint(store, renderer, server) as (_, resources_id),
    ):
        with RunnerProcesses(AGENT_REFERENCE, url, n_processes, concurrency=runner_concurrency, token=token) as runners:
            runners.supervise()
            warm_s = await warm_up(store, resources_id, n_processes)
            print(f"{name}: {n_processes} runner process(es) ready after {warm_s:.1f} s (not timed)", flush=True)
            row, _results = await timed_batch(name, store, resources_id, n, concurrency, runners, forget=forget)
            if runners.alive != n_processes:
                raise RuntimeError(f"runner processes died: {runners.describe()}")
        # A warm-up rollout (warm-ups keep theirs): the timed ones may have been forgotten already.
        kept = await store.query_rollouts(status_in=["succeeded"], limit=1)
        spans = await store.query_spans(kept[0].rollout_id, "latest")
        return row, [s.model_dump(mode="json") for s in spans]


def _store_only_runner(url: str, token: str | None, spans: list[dict[str, Any]], concurrency: int, stop: Any) -> None:
    """Process (c): a runner without agent or tracer; each rollout stores ``spans`` and succeeds."""
    template = [agl.Span.model_validate(s) for s in spans]

    async def finish(client: FinishingClient, rollout: agl.AttemptedRollout) -> None:
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        fresh = {"rollout_id": rid, "attempt_id": aid}
        spans = [span.model_copy(update={**fresh, "span_id": uuid.uuid4().hex[:16]}) for span in template]
        await client.finish(rid, aid, spans, "succeeded")

    async def serve() -> None:
        client = TokenStoreClient(url, token)
        finishing = FinishingClient(client)
        running: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                free = concurrency - len(running)
                rollouts = await client.dequeue_many_rollouts(limit=free, worker_id="Worker-0") if free else []
                for rollout in rollouts:
                    task = asyncio.create_task(finish(finishing, rollout))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if not rollouts:
                    await asyncio.sleep(0.05)  # the runners' idle poll interval
        finally:
            await client.close()

    asyncio.run(serve())


async def store_only(spans: list[dict[str, Any]], n: int, concurrency: int, runner_concurrency: int) -> Row:
    """Row (c)."""
    async with served_store() as (store, url, token):
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        process = context.Process(
            target=_store_only_runner,
            args=(url, token, spans, runner_concurrency, stop),
            name="store-only-runner",
            daemon=True,
        )
        process.start()
        try:
            warm = await run_rollouts(
                requests(8, None),
                store=AglRolloutStore(store),
                triplets=AglTripletSource(EndpointTraceToTriplet()),
                options=RolloutOptions(concurrency=8, rollout_timeout_s=RUNNER_STARTUP_TIMEOUT_S),
            )
            if any(r.status != "succeeded" for r in warm):
                raise RuntimeError("the store-only runner failed its warm-up")
            # The replayed reward is (a)'s first rollout's: check the shape, not the value.
            row, _ = await timed_batch("(c) store only", store, None, n, concurrency, None, check_rewards=False)
            return row
        finally:
            stop.set()
            process.join(10)
            if process.is_alive():
                process.kill()


async def main(args: argparse.Namespace) -> None:
    only = set(args.only.split(","))
    rows: dict[str, Row] = {}
    spans: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        renderer = tiny_renderer(Path(tmp))
        if "b" in only:
            rows["b"], _ = await with_runners(
                f"(b) stock: {args.stock_runners}x LitAgentRunner + LLMProxy",
                renderer,
                "litellm",
                args.stock_runners,
                None,
                args.stock_rollouts,
                args.concurrency,
                forget=False,  # Agent-lightning keeps every rollout
            )
        if only & {"a", "c"}:
            rows["a"], spans = await with_runners(
                f"(a) ours: {args.runners}x ConcurrentRunner({args.runner_concurrency}) + lean",
                renderer,
                "lean",
                args.runners,
                args.runner_concurrency,
                args.rollouts,
                args.concurrency,
            )
            print(f"spans per rollout of (a) in the store: {[s['name'] for s in spans]}", flush=True)
        if "c" in only:
            rows["c"] = await store_only(spans, args.rollouts, args.concurrency, args.runner_concurrency)
        if "d" in only:
            rows["d"], _ = await with_runners(
                "(d) as (a), the store in its own process",
                renderer,
                "lean",
                args.runners,
                args.runner_concurrency,
                args.rollouts,
                args.concurrency,
                store_process=True,
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    print(f"loop concurrency {args.concurrency}; every rollout: succeeded, 1 triplet, a reward (its own in (a), (b))")
    print(f"{'':48} {'rollouts':>8} {'wall s':>7} {'rollouts/s':>10} {'trainer CPU ms/r':>16} {'runner CPU ms/r':>15}")
    for key in ("a", "b", "c", "d"):
        if key in rows:
            r = rows[key]
            print(
                f"{r.name:48} {r.rollouts:8d} {r.wall_s:7.2f} {r.rate:10.1f} "
                f"{1000 * r.trainer_cpu_s / r.rollouts:16.2f} {1000 * r.runner_cpu_s / r.rollouts:15.2f}"
            )
    if "a" in rows:
        a = rows["a"]
        line = f"(a) {a.rate:.1f} rollouts/s (target >= 150)"
        if "b" in rows:
            line += f"; (a)/(b) = {a.rate / rows['b'].rate:.1f}x (target >= 10x)"
        if "c" in rows:
            line += f"; (a)/(c) = {a.rate / rows['c'].rate:.2f} (target >= 0.5, i.e. within 2x)"
        print(line)
        print(f"(a) trainer process CPU: {a.trainer_cpu_s / a.rollouts * 1000:.2f} ms per rollout (time.process_time)")
    if "d" in rows:
        d = rows["d"]
        cpu = d.trainer_cpu_s / d.rollouts * 1000
        print(f"(d) {d.rate:.1f} rollouts/s, trainer process CPU {cpu:.2f} ms per rollout (target <= 5)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=512, help="rollouts of (a) and (c)")
    parser.add_argument("--stock-rollouts", type=int, default=128, help="rollouts of (b)")
    parser.add_argument("--runners", type=int, default=1, help="concurrent runner processes of (a)")
    parser.add_argument("--runner-concurrency", type=int, default=64)
    parser.add_argument("--stock-runners", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=128, help="rollouts in the store at once (the loop's cap)")
    parser.add_argument("--only", default="a,b,c,d", help="rows to run, e.g. a,c (c needs a: it replays a's spans)")
    parser.add_argument("--profile", action="store_true", help="cProfile this process during each timed batch")
    parser.add_argument("--keep-rollouts", action="store_true", help="keep finished rollouts in the store")
    parsed = parser.parse_args()
    PROFILE = parsed.profile
    FORGET = not parsed.keep_rollouts
    asyncio.run(main(parsed))
