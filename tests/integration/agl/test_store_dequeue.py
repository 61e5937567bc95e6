"""A runner's dequeue waits on the project's store server for a rollout; elsewhere it is the stock call.

On a server with ``adapters.agl.dequeue``'s route a request held while the queue is empty gets the
rollout enqueued meanwhile, started for the asking worker; an empty answer says it waited; a client
that has gone away is handed nothing, so the rollout stays queued for another runner. On a stock
Agent-lightning server the same client falls back to the stock dequeue.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import agentlightning as agl
import pytest

from adapters.agl.dequeue import MAX_WAIT_S, WaitingDequeue
from tests.support.rollouts import enqueue
from tests.support.stores import served_store

pytestmark = pytest.mark.slow


async def test_a_held_dequeue_takes_the_rollout_enqueued_while_it_waits() -> None:
    async with served_store() as server:
        client = agl.LightningStoreClient(server.endpoint)
        try:
            waiting = WaitingDequeue(client, MAX_WAIT_S)
            taking = asyncio.create_task(waiting.dequeue("worker-1"))
            await asyncio.sleep(0.3)
            assert not taking.done(), "an empty queue is waited on, not answered at once"
            [rollout_id] = await enqueue(cast(agl.LightningStore, server.store), [{"n": 1}])
            taken = await asyncio.wait_for(taking, 30)
            assert taken is not None and taken.rollout_id == rollout_id
            assert taken.attempt.worker_id == "worker-1"
            assert not waiting.waited

            nothing = await asyncio.wait_for(WaitingDequeue(client, 0.05).dequeue("worker-1"), 30)
            assert nothing is None
        finally:
            await client.close()


async def test_an_empty_answer_after_the_wait_says_so() -> None:
    async with served_store() as server:
        client = agl.LightningStoreClient(server.endpoint)
        try:
            waiting = WaitingDequeue(client, 0.05)
            assert await asyncio.wait_for(waiting.dequeue("worker-1"), 30) is None
            assert waiting.waited, "the runner need not sleep before asking again"
        finally:
            await client.close()


async def test_a_runner_that_left_is_handed_nothing() -> None:
    async with served_store() as server:
        client = agl.LightningStoreClient(server.endpoint)
        try:
            taking = asyncio.create_task(WaitingDequeue(client, MAX_WAIT_S).dequeue("gone"))
            await asyncio.sleep(0.3)
            taking.cancel()  # the runner stops: its connection closes
            with contextlib.suppress(asyncio.CancelledError):
                await taking
            await asyncio.sleep(0.3)
            [rollout_id] = await enqueue(cast(agl.LightningStore, server.store), [{"n": 1}])
            await asyncio.sleep(0.3)
            rollout = await cast(agl.LightningStore, server.store).get_rollout_by_id(rollout_id)
            assert rollout is not None and rollout.status == "queuing"
        finally:
            await client.close()


async def test_a_stock_server_is_polled_the_stock_way() -> None:
    async with served_store(project_routes=False) as server:
        client = agl.LightningStoreClient(server.endpoint)
        try:
            waiting = WaitingDequeue(client, MAX_WAIT_S)
            assert await asyncio.wait_for(waiting.dequeue("worker-1"), 30) is None
            assert not waiting.waited, "the stock dequeue answers at once: the runner sleeps before the next"
            [rollout_id] = await enqueue(cast(agl.LightningStore, server.store), [{"n": 1}])
            taken = await asyncio.wait_for(waiting.dequeue("worker-1"), 30)
            assert taken is not None and taken.rollout_id == rollout_id
        finally:
            await client.close()
