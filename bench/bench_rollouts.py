"""Completion detection: this project's batch loop vs the original's 5 s per-rollout polling.

Same workload for both, in one run: N rollouts of a trivial agent, one real in-process
``LitAgentRunner``, Agent-lightning's real ``InMemoryLightningStore``, concurrency 16.

    .venv/bin/python bench/bench_rollouts.py [--rollouts 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl
from agentlightning.execution import ThreadingEvent

from adapters.agl_runners import run_runner
from adapters.agl_store import AglRolloutStore, AglTripletSource
from app.rollouts import RolloutOptions, RolloutStats, run_rollouts
from domain.groups import RolloutResult
from ports.rollout_store import RolloutRequest
from tests.integration.agents import reward_only

POLL_INTERVAL_S = 5.0


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


async def measure(runner_fn: Loop, n: int, concurrency: int) -> dict[str, float]:
    store = agl.InMemoryLightningStore()
    update = await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    stop = ThreadingEvent()
    runner = asyncio.create_task(run_runner(reward_only, store, stop, poll_interval_s=0.02))
    started = time.perf_counter()
    seen = await runner_fn(store, update.resources_id, n, concurrency)
    wall = time.perf_counter() - started
    stop.set()
    await asyncio.wait_for(runner, 30)
    calls = seen.pop("__calls__")
    rollouts = {r.rollout_id: r for r in await store.query_rollouts()}
    latency = sorted(seen[rid] - (rollouts[rid].end_time or seen[rid]) for rid in seen)
    return {
        "wall_s": wall,
        "p50_ms": 1000 * statistics.median(latency),
        "p99_ms": 1000 * latency[min(len(latency) - 1, int(0.99 * len(latency)))],
        "calls_per_rollout": calls / n,
        "rollouts_per_s": n / wall,
    }


async def main(n: int, concurrency: int) -> None:
    results = {
        "agl-tinker loop": await measure(ours, n, concurrency),
        "original 5 s polling": await measure(original_polling, n, concurrency),
    }
    print(f"{n} rollouts, concurrency {concurrency}, one in-process runner")
    print(f"{'':22} {'wall s':>8} {'p50 detect ms':>14} {'p99 detect ms':>14} {'calls/rollout':>14} {'rollouts/s':>11}")
    for name, r in results.items():
        print(
            f"{name:22} {r['wall_s']:8.2f} {r['p50_ms']:14.1f} {r['p99_ms']:14.1f} "
            f"{r['calls_per_rollout']:14.2f} {r['rollouts_per_s']:11.1f}"
        )
    ours_r, orig = results["agl-tinker loop"], results["original 5 s polling"]
    print(
        f"ratio original/ours: wall {orig['wall_s'] / ours_r['wall_s']:.1f}x, p50 detection "
        f"{orig['p50_ms'] / max(ours_r['p50_ms'], 1e-3):.0f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.rollouts, args.concurrency))
