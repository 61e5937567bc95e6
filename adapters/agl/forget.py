"""Forgetting trained rollouts: the in-memory store's records of a rollout leave memory once it is trained.

Agent-lightning 0.3.0's ``InMemoryLightningStore`` keeps every rollout, attempt, span, sequence
counter and completion event for the life of the process (it evicts spans only above 70% of the
machine's memory, and rollouts never), about 15 KB a rollout for the demo: a million-rollout run
would hold gigabytes. It has no public delete, so ``forget_in_memory`` removes a rollout the way
the store's own span eviction does (``evict_spans_for_rollout``: its private collections), under
the collections' write locks, and keeps the size counters its statistics report true. The store
servers this project starts answer ``FORGET_PATH`` with it, so a trainer attached over HTTP (to
``agl-tinker store``) forgets there too; other servers keep everything (``forget_over_http`` says so
once in the log).

Only finished rollouts may be forgotten: one a runner still writes to would come back as an error
for that runner (the caller holds back rollouts that timed out or were cancelled for a while).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
from agentlightning import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agentlightning.store.client_server import API_V1_AGL_PREFIX
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

logger = logging.getLogger(__name__)

FORGET_ROUTE = "/agl-tinker/rollouts/forget"
FORGET_PATH = API_V1_AGL_PREFIX + FORGET_ROUTE


def _count(removed: Any, depth: int) -> int:
    """Items in a removed subtree of a ``ListBasedCollection`` (``depth``: its remaining key levels)."""
    if removed is None:
        return 0
    if depth == 0:
        return 1
    return sum(_count(child, depth - 1) for child in removed.values())


async def forget_in_memory(store: InMemoryLightningStore, rollout_ids: Sequence[str]) -> int:
    """Remove the rollouts, their attempts, spans and bookkeeping from ``store``; how many were there."""
    forgotten = 0
    async with store.collections.atomic(
        mode="rw", labels=["rollouts", "attempts", "spans", "span_sequence_ids"]
    ) as collections:
        # (collection, key levels below the rollout id): rollouts by id, attempts by (id, attempt),
        # spans by (id, attempt, span).
        levels = ((collections.rollouts, 0), (collections.attempts, 1), (collections.spans, 2))
        for rollout_id in rollout_ids:
            for collection, depth in levels:
                removed = collection._items.pop(rollout_id, None)
                collection._size -= _count(removed, depth)
                if depth == 0 and removed is not None:
                    forgotten += 1
            await collections.span_sequence_ids.pop(rollout_id)
    for rollout_id in rollout_ids:
        store._completion_events.pop(rollout_id, None)
        store._start_time_by_rollout.pop(rollout_id, None)
        store._total_span_bytes -= store._span_bytes_by_rollout.pop(rollout_id, 0)
        store._running_rollout_ids.discard(rollout_id)
        store._evicted_rollout_span_sets.discard(rollout_id)
    return forgotten


class ForgetRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    rollout_ids: list[str]


def serve_forget(server: LightningStoreServer) -> LightningStoreServer:
    """Add ``FORGET_PATH`` to ``server`` (before it starts), for its in-memory store."""
    if server.app is None:
        raise RuntimeError("the store server has no app to extend")
    store = server.store
    if not isinstance(store, InMemoryLightningStore):
        return server

    async def forget(body: ForgetRequest) -> dict[str, int]:
        return {"forgotten": await forget_in_memory(store, body.rollout_ids)}

    server.app.router.routes.insert(0, APIRoute(FORGET_PATH, forget, methods=["POST"]))
    return server


class ForgettingClient:
    """Asks a store server to forget rollouts; a server without the route is told nothing more."""

    def __init__(self, client: LightningStoreClient) -> None:
        self._client = client
        self._route = True

    async def forget(self, rollout_ids: Sequence[str]) -> int:
        if not self._route or not rollout_ids:
            return 0
        try:
            answer = await self._client._request_json("post", FORGET_ROUTE, json={"rollout_ids": list(rollout_ids)})
        except aiohttp.ClientResponseError as error:
            if error.status not in (404, 405):
                raise
            self._route = False
            logger.info("the store at %s cannot forget trained rollouts; it keeps them", self._client.server_address)
            return 0
        return int(answer["forgotten"])
