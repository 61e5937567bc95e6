"""End-to-end demo of the rollout path: embedded store, a real runner, grouping and metrics.

Runs a small dataset through Agent-lightning's real ``InMemoryLightningStore`` and
``LitAgentRunner`` with the seed-compatible ``do_group_of_group_rollouts``, then prints the group
metrics, the rollout throughput, and what the deadline does to a rollout no runner takes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from functools import partial

import agentlightning as agl
from agentlightning.execution import ThreadingEvent
from rich.console import Console

from adapters.agl_runners import run_runner
from app.compat import AGLDataset, do_group_of_group_rollouts
from app.demo_agent import parity_agent
from app.rollouts import RolloutStats
from domain.groups import RolloutResult

console = Console()


def _count_status(counts: Counter[str], _index: int, result: RolloutResult) -> None:
    counts[result.status] += 1


async def demo(n_tasks: int, group_size: int, batch_size: int) -> None:
    store = agl.InMemoryLightningStore()
    adapter = agl.TracerTraceToTriplet()
    update = await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    dataset = AGLDataset([{"n": i} for i in range(n_tasks)], batch_size=batch_size, group_size=group_size, seed=0)
    stop = ThreadingEvent()
    runner = asyncio.create_task(run_runner(parity_agent, store, stop, poll_interval_s=0.02))
    try:
        for i_batch in range(len(dataset)):
            stats = RolloutStats()
            statuses: Counter[str] = Counter()
            started = time.perf_counter()
            groups = await do_group_of_group_rollouts(
                dataset.get_batch(i_batch),
                update.resources_id,
                i_batch,
                store=store,
                adapter=adapter,
                mode="train",
                rollout_timeout_s=30.0,
                stats=stats,
                on_result=partial(_count_status, statuses),
            )
            elapsed = time.perf_counter() - started
            n_rollouts = sum(statuses.values())
            console.print(
                f"batch {i_batch}: {n_rollouts} rollouts in {elapsed:.2f}s ({n_rollouts / elapsed:.1f}/s, "
                f"{stats.store_calls / n_rollouts:.2f} store calls each); statuses {dict(statuses)}; "
                f"{len(groups)} of {batch_size} groups trainable (the demo agent makes no LLM call yet)"
            )
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)

    orphan = agl.InMemoryLightningStore()
    started = time.perf_counter()
    await do_group_of_group_rollouts(
        dataset.get_batch(0)[:1],
        update.resources_id,
        0,
        store=orphan,
        adapter=adapter,
        mode="train",
        rollout_timeout_s=1.0,
    )
    orphan_statuses = {str(r.status) for r in await orphan.query_rollouts()}
    console.print(
        f"deadline: a group no runner takes ended after {time.perf_counter() - started:.2f}s; "
        f"store status {orphan_statuses}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(demo(args.tasks, args.group_size, args.batch_size))


if __name__ == "__main__":
    main()
