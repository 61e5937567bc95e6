"""Rolling tasks out with an in-process runner and waiting for them: one bounded wait, used everywhere."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import agentlightning as agl
from agentlightning.execution import ThreadingEvent

from adapters.agl.store import AglTripletSource
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.runner.processes import run_runner
from domain.trajectory import ReconstructedTrajectory, reconstruct_trajectory
from tests.support.waits import HANG_S, until


async def wait_finished(
    store: agl.LightningStore,
    ids: Sequence[str],
    *,
    timeout_s: float = HANG_S,
    watch: asyncio.Task[Any] | None = None,
    hung: str = "rollouts did not finish",
) -> None:
    """Until every rollout in ``ids`` is finished; fails if ``watch`` (the runner serving them) ends first."""

    async def finished() -> bool:
        assert watch is None or not watch.done(), watch
        return len(await store.wait_for_rollouts(rollout_ids=list(ids), timeout=0)) == len(ids)

    await until(finished, hung, timeout_s=timeout_s)


async def wait_succeeded(store: agl.LightningStore, ids: Sequence[str]) -> None:
    await wait_finished(store, ids)
    for rollout_id in ids:
        rollout = await store.get_rollout_by_id(rollout_id)
        assert rollout is not None and rollout.status == "succeeded", rollout


async def enqueue(store: agl.LightningStore, tasks: Sequence[Any]) -> list[str]:
    return [(await store.enqueue_rollout(input=task, mode="train")).rollout_id for task in tasks]


async def run(
    store: agl.LightningStore, agent: agl.LitAgent[Any], tasks: Sequence[Any], *, succeeded: bool = True
) -> list[str]:
    """Roll ``tasks`` out with an in-process runner on this event loop (async agents); their ids.

    ``succeeded``: each must have succeeded (else each must only have finished)."""
    stop = ThreadingEvent()
    runner = asyncio.create_task(run_runner(agent, store, stop, poll_interval_s=0.02))
    try:
        ids = await enqueue(store, tasks)
        await (wait_succeeded(store, ids) if succeeded else wait_finished(store, ids))
        return ids
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)


async def run_in_thread(store: agl.LightningStore, agent: agl.LitAgent[Any], tasks: Sequence[Any]) -> list[str]:
    """Roll ``tasks`` out with a runner on its own thread and loop: a sync agent blocks the loop it runs
    on, and the endpoint samples on this test's loop."""
    stop = ThreadingEvent()
    errors: list[BaseException] = []

    def host() -> None:
        try:
            asyncio.run(run_runner(agent, store, stop, poll_interval_s=0.02))
        except BaseException as error:  # reported by the test below
            errors.append(error)

    thread = threading.Thread(target=host, name="sync-agent-runner", daemon=True)
    thread.start()
    try:
        ids = await enqueue(store, tasks)
        await wait_succeeded(store, ids)
        return ids
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)
        assert not thread.is_alive() and not errors, errors


async def trajectory(
    store: agl.LightningStore, rollout_id: str, adapter: EndpointTraceToTriplet | None = None
) -> ReconstructedTrajectory:
    """The rollout's latest attempt, as the trainer reconstructs it from the endpoint's spans."""
    spans = await store.query_spans(rollout_id, "latest")
    return reconstruct_trajectory(AglTripletSource(adapter or EndpointTraceToTriplet()).adapt(list(spans)))
