"""Soak: the trainer process's memory over tens of thousands of rollouts, keeping them in the store vs forgetting them.

The set-up of ``bench_throughput`` row (a), as ``agl-tinker train`` runs it: an embedded
``InMemoryLightningStore`` served on 127.0.0.1 with the project's routes, the lean policy endpoint
over a scripted sampler, one ``ConcurrentRunner`` process (concurrency 64) running
``bench.bench_agents:chat_once`` (one chat call, then its reward), and ``run_rollouts`` with
``EndpointTraceToTriplet`` reconstruction, every rollout checked. Two runs side by side in one
process, each with a fresh store, endpoint and runner: ``keep`` (``keep_rollouts=true``: every
rollout, attempt and span stays in the store, Agent-lightning's behaviour) and ``forget`` (the
default: the store forgets a rollout once its trajectory is rebuilt). After each batch the
trainer's RSS is sampled (after ``gc.collect()``); growth per rollout is the least-squares slope of
RSS over the rollouts done, from the second quarter of the run on (the first fills allocator
pools and caches).

    .venv/bin/python bench/bench_soak.py [--rollouts 20480] [--batch 512] [--only keep,forget]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from tinker_cookbook import renderers

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from bench.bench_throughput import (
    AGENT_REFERENCE,
    check,
    policy_endpoint,
    requests,
    served_store,
    tiny_renderer,
    warm_up,
)

RUNNER_CONCURRENCY = 64


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def slope_kib_per_rollout(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MiB) over rollouts done, in KiB per rollout."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return 1024 * covariance / variance if variance else 0.0


async def soak(
    name: str, forget: bool, n_rollouts: int, batch: int, renderer: renderers.Renderer
) -> tuple[float, float, float]:
    """(RSS at the start of the measured part, at the end, KiB per rollout) for one mode."""
    async with served_store() as (store, url, token), policy_endpoint(store, renderer, "lean") as (_, resources_id):
        with RunnerProcesses(AGENT_REFERENCE, url, 1, concurrency=RUNNER_CONCURRENCY, token=token) as runners:
            await warm_up(store, resources_id, 1)
            options = RolloutOptions(
                concurrency=2 * RUNNER_CONCURRENCY, rollout_timeout_s=120, runners=runners, forget_finished=forget
            )
            points: list[tuple[int, float]] = [(0, rss_mib())]
            started = time.perf_counter()
            for done in range(0, n_rollouts, batch):
                first = 1000 + done
                results = await run_rollouts(
                    requests(batch, resources_id, start=first),
                    store=AglRolloutStore(store),
                    triplets=AglTripletSource(EndpointTraceToTriplet()),
                    options=options,
                )
                check(results, batch, first)
                points.append((done + batch, rss_mib()))
            wall = time.perf_counter() - started
            stats = await store.statistics()
    measured = points[len(points) // 4 :]
    slope = slope_kib_per_rollout(measured)
    print(
        f"{name:<7} {n_rollouts} rollouts in {wall:.0f} s ({n_rollouts / wall:.0f}/s): trainer RSS "
        f"{points[0][1]:.0f} MiB at the start, {measured[0][1]:.0f} MiB after {measured[0][0]} rollouts, "
        f"{points[-1][1]:.0f} MiB at the end; {slope:.2f} KiB per rollout from there on; store holds "
        f"{stats['total_rollouts']} rollouts, {stats['total_spans']} spans",
        flush=True,
    )
    return measured[0][1], points[-1][1], slope


async def main(args: argparse.Namespace) -> None:
    modes = [m for m in args.only.split(",") if m]
    with tempfile.TemporaryDirectory() as directory:
        renderer = tiny_renderer(Path(directory))
        rows = {mode: await soak(mode, mode == "forget", args.rollouts, args.batch, renderer) for mode in modes}
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    for mode, (start, end, slope) in rows.items():
        target = " (target <= 1 KiB)" if mode == "forget" else ""
        print(f"{mode:<7} RSS {start:.0f} -> {end:.0f} MiB, {slope:.2f} KiB per rollout{target}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=20480)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--only", default="keep,forget")
    asyncio.run(main(parser.parse_args()))
