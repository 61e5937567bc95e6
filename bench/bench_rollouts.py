"""Completion detection: this project's batch loop vs the original's 5 s per-rollout polling.

Same workload for both loops, in one run: N rollouts of a trivial agent (no LLM call) under a
global concurrency cap, on Agent-lightning's real stores and runners. Two set-ups:

- ``--runners N`` (N >= 1, the default): N ``LitAgentRunner`` worker processes attached over HTTP
  to a ``LightningStoreServer`` on 127.0.0.1 serving an ``InMemoryLightningStore``; the loop talks
  to it through ``LightningStoreClient``, the way a distributed deployment runs. Both loops share
  the server and the runner processes, which are warmed up first (every runner has finished a
  rollout) so neither loop pays for process start-up.
- ``--runners 0``: one in-process runner on an embedded ``InMemoryLightningStore``, a fresh store and
  runner per loop (the previous set-up of this benchmark).

    .venv/bin/python bench/bench_rollouts.py [--rollouts 256] [--runners 4] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
from agentlightning.execution import ThreadingEvent

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import RunnerProcesses, run_runner
from app.usecases.rollouts import RolloutOptions, RolloutStats, run_rollouts
from domain.groups import RolloutResult
from ports.rollout_store import RolloutRequest
from tests.integration.agents import reward_only

POLL_INTERVAL_S = 5.0
AGENT_REFERENCE = "tests.integration.agents:reward_only"
RUNNER_STARTUP_TIMEOUT_S = 300.0
WARM_UP_SLEEP_S = 1.0
OURS, ORIGINAL = "agl-tinker loop", "original 5 s polling"


async def original_polling(store: agl.LightningStore, resources_id: str, n: int, concurrency: int) -> dict[str, float]:
    """The original's loop: enqueue one, poll it every 5 s (+-10 %) until terminal."""
    semaphore = asyncio.Semaphore(concurrency)
    calls = 0
    seen: dict[str, float] = {}

    async def one(i: int) -> None:
        nonlocal calls
        async with semaphore:
            rollout = await store.enqueue_rollout({"reward": float(i)}, mode="train", resources_id=resources_id)
            calls += 1
            while True:
                current = await store.get_rollout_by_id(rollout.rollout_id)
                calls += 1
                if current is not None and current.status in ("succeeded", "failed", "cancelled"):
                    seen[rollout.rollout_id] = time.time()
                    break
                await asyncio.sleep(POLL_INTERVAL_S * random.uniform(0.9, 1.1))

    await asyncio.gather(*(one(i) for i in range(n)))
    seen["__calls__"] = calls
    return seen


async def ours(store: agl.LightningStore, resources_id: str, n: int, concurrency: int) -> dict[str, float]:
    stats = RolloutStats()
    seen: dict[str, float] = {}

    def noticed(_: int, result: RolloutResult) -> None:
        seen[result.rollout_id] = time.time()

    await run_rollouts(
        [RolloutRequest(task={"reward": float(i)}, mode="train", resources_id=resources_id) for i in range(n)],
        store=AglRolloutStore(store),
        triplets=AglTripletSource(agl.TracerTraceToTriplet()),
        options=RolloutOptions(concurrency=concurrency, rollout_timeout_s=120),
        on_result=noticed,
        stats=stats,
    )
    seen["__calls__"] = stats.store_calls
    return seen


Loop = Callable[[agl.LightningStore, str, int, int], Awaitable[dict[str, float]]]
LOOPS: dict[str, Loop] = {OURS: ours, ORIGINAL: original_polling}
ONLY = {"ours": OURS, "polling": ORIGINAL}


async def measure(
    loop: Loop, store: agl.LightningStore, resources_id: str, n: int, concurrency: int
) -> dict[str, float]:
    """Run one loop over ``n`` rollouts; latency is from the store's end time to the loop noticing."""
    started = time.perf_counter()
    seen = await loop(store, resources_id, n, concurrency)
    wall = time.perf_counter() - started
    calls = seen.pop("__calls__")
    rollouts = {r.rollout_id: r for r in await store.query_rollouts(rollout_id_in=list(seen))}
    if len(rollouts) != n or any(r.status != "succeeded" for r in rollouts.values()):
        raise RuntimeError(f"expected {n} succeeded rollouts, got {sorted(str(r.status) for r in rollouts.values())}")
    latency = sorted(seen[rid] - (rollouts[rid].end_time or seen[rid]) for rid in seen)
    return {
        "wall_s": wall,
        "p50_ms": 1000 * statistics.median(latency),
        "p99_ms": 1000 * latency[min(len(latency) - 1, int(0.99 * len(latency)))],
        "calls_per_rollout": calls / n,
        "rollouts_per_s": n / wall,
    }


async def in_process(loops: dict[str, Loop], n: int, concurrency: int) -> dict[str, dict[str, float]]:
    """Each loop on a fresh embedded store with one in-process runner."""
    results: dict[str, dict[str, float]] = {}
    for name, loop in loops.items():
        store = agl.InMemoryLightningStore()
        update = await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        stop = ThreadingEvent()
        runner = asyncio.create_task(run_runner(reward_only, store, stop, poll_interval_s=0.02))
        try:
            results[name] = await measure(loop, store, update.resources_id, n, concurrency)
        finally:
            stop.set()
            await asyncio.wait_for(runner, 30)
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def warm_up(client: agl.LightningStoreClient, resources_id: str, n_runners: int) -> float:
    """Until every runner process takes part; returns the seconds it took.

    Agent-lightning 0.3.0's ``Runner.run_context`` ignores its ``worker_id`` (every process reports
    as ``Worker-0``), so readiness is read from timing instead: ``n_runners`` rollouts of 1 s each
    finish in under 2 s only if no runner ran two of them, i.e. all ``n_runners`` took one.
    """
    started = time.perf_counter()
    while True:
        if time.perf_counter() - started > RUNNER_STARTUP_TIMEOUT_S:
            raise TimeoutError(f"{n_runners} runner processes did not all become ready")
        batch_started = time.perf_counter()
        await run_rollouts(
            [
                RolloutRequest(
                    task={"reward": 0.0, "sleep_s": WARM_UP_SLEEP_S}, mode="train", resources_id=resources_id
                )
                for _ in range(n_runners)
            ],
            store=AglRolloutStore(client),
            triplets=AglTripletSource(agl.TracerTraceToTriplet()),
            options=RolloutOptions(concurrency=n_runners, rollout_timeout_s=RUNNER_STARTUP_TIMEOUT_S),
        )
        if time.perf_counter() - batch_started < 2 * WARM_UP_SLEEP_S:
            return time.perf_counter() - started


async def runner_processes(
    loops: dict[str, Loop], n: int, concurrency: int, n_runners: int
) -> tuple[dict[str, dict[str, float]], float]:
    """Every loop against one store server with ``n_runners`` worker processes, over HTTP."""
    server = agl.LightningStoreServer(agl.InMemoryLightningStore(), host="127.0.0.1", port=free_port())
    await server.start()
    client = agl.LightningStoreClient(server.endpoint)
    try:
        update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        with RunnerProcesses(AGENT_REFERENCE, server.endpoint, n_runners) as runners:
            warm_up_s = await warm_up(client, update.resources_id, n_runners)
            results = {
                name: await measure(loop, client, update.resources_id, n, concurrency) for name, loop in loops.items()
            }
            if runners.alive != n_runners:
                raise RuntimeError(f"{n_runners - runners.alive} runner process(es) died during the benchmark")
        return results, warm_up_s
    finally:
        await client.close()
        await server.stop()


async def main(n: int, concurrency: int, n_runners: int, only: str | None) -> None:
    loops = {name: loop for name, loop in LOOPS.items() if only is None or name == ONLY[only]}
    if n_runners == 0:
        results = await in_process(loops, n, concurrency)
        print(f"{n} rollouts, concurrency {concurrency}, one in-process runner")
    else:
        results, warm_up_s = await runner_processes(loops, n, concurrency, n_runners)
        print(
            f"{n} rollouts, concurrency {concurrency}, {n_runners} runner processes over HTTP "
            f"(LightningStoreServer on 127.0.0.1; runners ready after {warm_up_s:.1f} s, not timed)"
        )
    print(f"{'':22} {'wall s':>8} {'p50 detect ms':>14} {'p99 detect ms':>14} {'calls/rollout':>14} {'rollouts/s':>11}")
    for name, r in results.items():
        print(
            f"{name:22} {r['wall_s']:8.2f} {r['p50_ms']:14.1f} {r['p99_ms']:14.1f} "
            f"{r['calls_per_rollout']:14.2f} {r['rollouts_per_s']:11.1f}"
        )
    if OURS in results and ORIGINAL in results:
        ours_r, orig = results[OURS], results[ORIGINAL]
        print(
            f"ratio original/ours: wall {orig['wall_s'] / ours_r['wall_s']:.1f}x, p50 detection "
            f"{orig['p50_ms'] / max(ours_r['p50_ms'], 1e-3):.0f}x, p99 detection "
            f"{orig['p99_ms'] / max(ours_r['p99_ms'], 1e-3):.0f}x, store calls per rollout "
            f"{orig['calls_per_rollout'] / ours_r['calls_per_rollout']:.1f}x, rollouts/s "
            f"{ours_r['rollouts_per_s'] / orig['rollouts_per_s']:.1f}x (ours/original)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument(
        "--runners", type=int, default=4, help="runner processes over HTTP; 0 = one in-process runner (default 4)"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", choices=list(ONLY), help="run one loop only (default: both)")
    args = parser.parse_args()
    if args.rollouts < 1 or args.runners < 0 or args.concurrency < 1:
        parser.error("need --rollouts >= 1, --runners >= 0 and --concurrency >= 1")
    asyncio.run(main(args.rollouts, args.concurrency, args.runners, args.only))
