"""Runner processes that crash, hang or start slowly: the loop ends their rollouts promptly and keeps going.

Each test serves a store over HTTP on 127.0.0.1 and supervises real runner processes (spawned, so each
start imports Agent-lightning: seconds). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import agentlightning as agl
import pytest

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.agl.workers import StoreWorkers
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RUN_TIMEOUT, RUNNER_DIED, NoRunners, RolloutOptions, run_rollouts
from domain.groups import TIMED_OUT, RolloutResult
from ports.rollout_store import RolloutRequest
from ports.runner_pool import RunnerPool
from tests.support.waits import HANG_S, until

pytestmark = pytest.mark.slow

RUNNER_KINDS = pytest.mark.parametrize("concurrency", [None, 1], ids=["stock", "concurrent"])
"""Agent-lightning's ``LitAgentRunner`` and this project's concurrent runner (one slot: the same schedule)."""


@pytest.fixture
async def client(store_server: agl.LightningStoreServer) -> AsyncIterator[agl.LightningStoreClient]:
    store = agl.LightningStoreClient(store_server.endpoint)
    yield store
    await store.close()


async def run(
    client: agl.LightningStoreClient,
    runners: RunnerPool,
    options: RolloutOptions,
    *tasks: dict[str, float],
) -> list[RolloutResult]:
    update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    requests = [RolloutRequest(task=t, mode="train", resources_id=update.resources_id) for t in tasks]
    return await asyncio.wait_for(
        run_rollouts(
            requests,
            store=AglRolloutStore(client),
            triplets=AglTripletSource(agl.TracerTraceToTriplet()),
            options=RolloutOptions(
                rollout_timeout_s=options.rollout_timeout_s,
                queue_timeout_s=options.queue_timeout_s,
                concurrency=len(tasks),
                runners=runners,
            ),
        ),
        timeout=2 * HANG_S,  # several runner processes start (and restart) in one run
    )


async def running(client: agl.LightningStoreClient) -> bool:
    return bool(await client.query_rollouts(status_in=["preparing", "running"]))


@pytest.mark.fault
@RUNNER_KINDS
async def test_a_runner_killed_mid_rollout_is_restarted_and_its_rollout_ends_at_once(
    store_server: agl.LightningStoreServer, client: agl.LightningStoreClient, concurrency: int | None
) -> None:
    """runner SIGKILL mid-rollout -> its rollout ends at once (runner_died), the runner restarts, the batch ends"""
    runners = RunnerProcesses(
        "tests.integration.agents:reward_only", store_server.endpoint, 1, backoff_s=0.2, concurrency=concurrency
    )

    async def kill_once_taken() -> None:
        await until(lambda: running(client), "no runner took a rollout", interval_s=0.05)
        pid = runners._processes[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    with runners:
        runners.supervise()
        killer = asyncio.create_task(kill_once_taken())
        results = await run(
            client,
            runners,
            RolloutOptions(rollout_timeout_s=60),
            {"reward": 1.0, "sleep_s": 30.0},
            {"reward": 1.0},
            {"reward": 0.0},
        )
        await killer
        assert runners.restarts == 1 and runners.alive == 1
    # Ended as runner_died (at once), not timed out at its 60 s deadline.
    assert [(r.status, r.reason) for r in results] == [("failed", RUNNER_DIED), ("succeeded", ""), ("succeeded", "")]


@pytest.mark.fault
@RUNNER_KINDS
async def test_runners_that_die_on_every_rollout_end_the_batch_with_one_line(
    store_server: agl.LightningStoreServer, client: agl.LightningStoreClient, concurrency: int | None
) -> None:
    """all runners die on every rollout -> they are given up and the batch ends with one NoRunners line"""
    runners = RunnerProcesses(
        "tests.integration.agents:crashing_agent",
        store_server.endpoint,
        1,
        max_crashes=2,
        backoff_s=0.2,
        concurrency=concurrency,
    )
    with runners, pytest.raises(NoRunners) as caught:  # the runners given up, not a 300 s deadline, ends it
        runners.supervise()
        await run(client, runners, RolloutOptions(rollout_timeout_s=300, queue_timeout_s=300), *[{"crash": 1.0}] * 4)
    assert runners.given_up and runners.alive == 0
    message = str(caught.value)
    assert "\n" not in message and "0 of 1 runner processes alive" in message, message


@pytest.mark.fault
@RUNNER_KINDS
async def test_a_hung_agent_times_out_at_the_running_deadline_and_its_runner_is_restarted(
    store_server: agl.LightningStoreServer, client: agl.LightningStoreClient, concurrency: int | None
) -> None:
    """hanging agent -> timed out at the running deadline, its runner restarted, later rollouts succeed

    The stock runner's process is killed by the supervisor; the concurrent runner cancels the rollout
    itself, and since this sync agent ignores that and holds its only slot, it exits to be restarted.
    """
    runners = RunnerProcesses(
        "tests.integration.agents:reward_only", store_server.endpoint, 1, backoff_s=0.2, concurrency=concurrency
    )
    with runners:
        runners.supervise()
        results = await run(
            client,
            runners,
            RolloutOptions(rollout_timeout_s=3, queue_timeout_s=120),
            {"reward": 1.0, "sleep_s": 3600.0},
            {"reward": 1.0},
            {"reward": 0.5},
        )
        assert runners.restarts == 1 and not runners.given_up
    assert [(r.status, r.reason) for r in results] == [(TIMED_OUT, RUN_TIMEOUT), ("succeeded", ""), ("succeeded", "")]


@pytest.mark.fault
async def test_a_runner_slower_to_start_than_the_deadline_loses_no_rollout(
    store_server: agl.LightningStoreServer, client: agl.LightningStoreClient
) -> None:
    """runner start-up slower than the rollout deadline -> no rollout lost (the clock starts when one is taken)"""
    runners = RunnerProcesses(
        "tests.integration.slow_import_agent:slow_to_import", store_server.endpoint, 1, concurrency=4
    )
    with runners:
        runners.supervise()
        results = await run(
            client, runners, RolloutOptions(rollout_timeout_s=3, queue_timeout_s=120), {"reward": 1.0}, {"reward": 0.0}
        )
        assert runners.restarts == 0
    assert [r.status for r in results] == ["succeeded", "succeeded"]


async def test_a_worker_silent_in_the_store_is_taken_for_dead_until_it_speaks_again() -> None:
    store = agl.InMemoryLightningStore()
    now = [1000.0]
    workers = StoreWorkers(store, silence_s=30.0, clock=lambda: now[0])
    await store.enqueue_rollout(input={"reward": 1.0}, mode="train")
    await store.dequeue_rollout(worker_id="Worker-remote")
    await workers.refresh()
    assert (workers.alive, set(workers.dead_workers())) == (1, set())

    now[0] += 31.0
    await workers.refresh()
    assert (workers.alive, set(workers.dead_workers())) == (0, {"Worker-remote"})
    assert not workers.given_up, "remote runners may come back"

    await store.update_worker("Worker-remote", {"in_flight": 1})
    await workers.refresh()
    assert set(workers.dead_workers()) == set() and workers.alive == 1


@pytest.mark.fault
async def test_a_remote_runner_killed_mid_rollout_ends_its_rollout_once_it_falls_silent(
    store_server: agl.LightningStoreServer, client: agl.LightningStoreClient
) -> None:
    """runner on another machine SIGKILLed mid-rollout -> its rollout ends as runner_died once its worker is silent

    Not at its 300 s deadline: the trainer did not start it and only sees its worker record in the store.
    """
    remote = RunnerProcesses("tests.integration.agents:reward_only", store_server.endpoint, 1, concurrency=4)

    async def kill_once_taken() -> None:
        await until(lambda: running(client), "the remote runner took no rollout", interval_s=0.05)
        await asyncio.sleep(0.5)
        pid = remote._processes[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    with remote:
        async with StoreWorkers(client, silence_s=3.0).watch(interval_s=0.5) as watched:
            killer = asyncio.create_task(kill_once_taken())
            results = await run(
                client, watched, RolloutOptions(rollout_timeout_s=300), {"reward": 1.0, "sleep_s": 120.0}
            )
            await killer
    # Ended as runner_died once the worker fell silent, not timed out at its 300 s deadline.
    assert [(r.status, r.reason) for r in results] == [("failed", RUNNER_DIED)]
