"""Taking a rollout from the queue: one request that waits on the server for one to arrive.

A runner with free slots asks the store for work all the time: every ``poll_interval_s`` (50 ms) while
the queue is empty, between batches and while its last rollouts run. Over HTTP each of those empty
dequeues costs the store server a full request (~2.5 ms of its CPU, in the trainer's process when the
store is embedded), about 40 a second for two runners whatever the run is doing. The store servers this
project starts (``adapters.agl.server``) therefore answer one more route, ``DEQUEUE_PATH``: the same
``dequeue_rollout`` call, repeated in the server's process every ``DEQUEUE_CHECK_S`` until a rollout comes or
``wait_s`` passes, so a runner takes a new rollout as soon after its enqueue as before, and two idle runners
cost the server ~39 ms of CPU a second instead of ~112 (``bench/bench_idle_runners.py``). A client that
has gone away is not handed a rollout. A runner attached to any other Agent-lightning server gets a 404 on
its first try and polls the stock way from then on.
"""

from __future__ import annotations

import asyncio
import logging
import time

from agentlightning import LightningStoreClient, LightningStoreServer
from agentlightning.store.client_server import API_V1_AGL_PREFIX
from agentlightning.types import AttemptedRollout
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

logger = logging.getLogger(__name__)

DEQUEUE_ROUTE = "/agl-tinker/queues/rollouts/dequeue-wait"
DEQUEUE_PATH = API_V1_AGL_PREFIX + DEQUEUE_ROUTE
DEQUEUE_CHECK_S = 0.05
"""How often the server looks at the queue again while a request waits: the runners' own poll interval, so a
rollout is taken as soon after its enqueue as before."""
MAX_WAIT_S = 5.0
"""Longest wait a request may ask for (well under the client's 30 s request timeout)."""


class DequeueWait(BaseModel):
    """The request body: the runner's worker id and how long the server may hold the request."""

    model_config = ConfigDict(frozen=True)

    worker_id: str | None = None
    wait_s: float = Field(default=0.0, ge=0.0, le=MAX_WAIT_S)


def serve_dequeue(server: LightningStoreServer) -> LightningStoreServer:
    """Add ``DEQUEUE_PATH`` to ``server`` (call before it starts), ahead of its catch-all routes."""
    if server.app is None:
        raise RuntimeError("the store server has no app to extend")

    async def dequeue(body: DequeueWait, request: Request) -> list[AttemptedRollout]:
        deadline = time.monotonic() + body.wait_s
        while True:
            # The server's own method: it takes its lock when its store is not thread-safe.
            rollout = await server.dequeue_rollout(worker_id=body.worker_id)
            if rollout is not None:
                return [rollout]
            if time.monotonic() >= deadline:
                return []
            await asyncio.sleep(DEQUEUE_CHECK_S)
            if await request.is_disconnected():
                return []  # a runner that left gets nothing: the rollout stays queued for another

    server.app.router.routes.insert(
        0, APIRoute(DEQUEUE_PATH, dequeue, methods=["POST"], response_model=list[AttemptedRollout])
    )
    return server


class WaitingDequeue:
    """A runner's dequeue: held on the server up to ``wait_s`` where it has the route, the stock call elsewhere.

    Like the stock ``dequeue_rollout`` it never raises: a failed request (a server not up yet) is logged at debug
    level and answers None, so the runner asks again after its poll interval.
    """

    def __init__(self, client: LightningStoreClient, wait_s: float) -> None:
        self._client = client
        self._wait_s = min(wait_s, MAX_WAIT_S)
        self._route: bool | None = None
        """Whether the server answers ``DEQUEUE_PATH``; unknown until the first call."""
        self.waited = False
        """Whether the latest empty answer came after waiting on the server (no need to sleep before the next)."""

    async def dequeue(self, worker_id: str | None) -> AttemptedRollout | None:
        """The next queued rollout, started for ``worker_id``; None when none came within the wait."""
        self.waited = False
        if self._route is False:
            return await self._client.dequeue_rollout(worker_id=worker_id)
        session = await self._client._get_session()
        body = {"worker_id": worker_id, "wait_s": self._wait_s}
        try:
            async with session.post(self._client.server_address + DEQUEUE_ROUTE, json=body) as response:
                if response.status in (404, 405) and not self._route:
                    self._route = False
                    logger.info("the store at %s has no waiting dequeue; polling it", self._client.server_address)
                    return await self._client.dequeue_rollout(worker_id=worker_id)
                response.raise_for_status()
                data = await response.json()
        except Exception as error:  # as the stock dequeue: the runner asks again after its poll interval
            logger.debug("dequeue failed: %s: %s", type(error).__name__, error)
            return None
        self._route = True
        if not data:
            self.waited = True
            return None
        return AttemptedRollout.model_validate(data[0])
