"""One request per finished rollout: its spans, their sequence ids and its status in a single call.

Agent-lightning 0.3.0's HTTP client has no batched span write: ``add_many_spans`` and
``get_many_span_sequence_ids`` send one request per span (two per span in all, each span echoed
back), then ``update_attempt`` one more. For a runner finishing many rollouts a second those
requests are the store server's main load. The store servers this project starts (the embedded
one of ``train`` and ``agl-tinker store``) therefore answer one more route, ``FINISH_PATH``, which
does the same three store calls in the server's process, in the same order (spans first, so a
reader of the terminal status finds them). A runner attached to any other Agent-lightning server
(``agl store``) gets a 404 on its first try and writes the stock way from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any, Literal

import aiohttp
from agentlightning import LightningStoreClient, LightningStoreServer, Span
from agentlightning.store.client_server import API_V1_AGL_PREFIX
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, ValidationError

logger = logging.getLogger(__name__)

FINISH_ROUTE = "/agl-tinker/attempts/finish"
FINISH_PATH = API_V1_AGL_PREFIX + FINISH_ROUTE

AttemptEnd = Literal["succeeded", "failed"]


class FinishedAttempt(BaseModel):
    """The request body: an attempt's spans (sequence ids assigned by the server) and its final status."""

    model_config = ConfigDict(frozen=True)

    rollout_id: str
    attempt_id: str
    status: AttemptEnd
    spans: list[dict[str, Any]]
    """``Span.model_dump(mode="json")`` of each span, in the order they were made."""
    numbered: list[int] = []
    """Indices of the spans the store numbered when they were emitted (rewards): they keep their sequence id."""


def serve_finish(server: LightningStoreServer) -> LightningStoreServer:
    """Add ``FINISH_PATH`` to ``server`` (call before it starts), ahead of its catch-all routes."""
    if server.app is None:
        raise RuntimeError("the store server has no app to extend")

    async def finish(body: FinishedAttempt) -> dict[str, int]:
        # The server's own methods: they take its lock when its store is not thread-safe.
        stored = 0
        if body.spans:
            kept = set(body.numbered)
            fresh = [i for i in range(len(body.spans)) if i not in kept]
            ids = await server.get_many_span_sequence_ids([(body.rollout_id, body.attempt_id)] * len(fresh))
            numbers = dict(zip(fresh, ids, strict=True))
            spans = [
                Span.model_validate(
                    {
                        **span,
                        "rollout_id": body.rollout_id,
                        "attempt_id": body.attempt_id,
                        "sequence_id": numbers.get(i, span.get("sequence_id")),
                    }
                )
                for i, span in enumerate(body.spans)
            ]
            stored = len(await server.add_many_spans(spans))
        await server.update_attempt(body.rollout_id, body.attempt_id, status=body.status)
        return {"spans": stored}

    server.app.router.routes.insert(0, APIRoute(FINISH_PATH, finish, methods=["POST"]))
    return server


class FinishingClient:
    """A runner's way to write a finished attempt: one request where the server has the route, else the stock calls."""

    def __init__(self, client: LightningStoreClient) -> None:
        self._client = client
        self._route: bool | None = None
        """Whether the server answers ``FINISH_PATH``; unknown until the first call."""

    async def finish(
        self,
        rollout_id: str,
        attempt_id: str,
        spans: Sequence[Span],
        status: AttemptEnd,
        numbered: Collection[int] = (),
    ) -> None:
        """Store ``spans``, then mark the attempt ``status``.

        Each span gets the store's next sequence id, except those at the indices ``numbered``, which the
        store numbered already when they were emitted.
        """
        if self._route is not False:
            # A plain dict, not ``FinishedAttempt.model_dump``: that would turn an agent's NaN reward into
            # null, which no span attribute accepts; each span's own dump keeps it, as the stock client sends it.
            body = {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "status": status,
                "spans": [span.model_dump(mode="json") for span in spans],
                "numbered": sorted(numbered),
            }
            try:
                await self._client._request_json("post", FINISH_ROUTE, json=body)
                self._route = True
                return
            except aiohttp.ClientResponseError as error:
                if error.status not in (404, 405) or self._route:
                    raise
                self._route = False
                url = self._client.server_address
                logger.info("the store at %s has no batched finish; writing spans one by one", url)
        await self._stock(rollout_id, attempt_id, spans, status, frozenset(numbered))

    async def _stock(
        self, rollout_id: str, attempt_id: str, spans: Sequence[Span], status: AttemptEnd, numbered: frozenset[int]
    ) -> None:
        if spans:
            fresh = [i for i in range(len(spans)) if i not in numbered]
            ids = await self._client.get_many_span_sequence_ids([(rollout_id, attempt_id)] * len(fresh))
            numbers = dict(zip(fresh, ids, strict=True))
            for i, span in enumerate(spans):
                try:
                    await self._client.add_span(
                        span.model_copy(update={"sequence_id": numbers.get(i, span.sequence_id)})
                    )
                except ValidationError:
                    # Stored; only the server's echo failed to parse: JSON turns a NaN reward into null. The
                    # NaN itself is the agent's, and reconstruction rejects and counts it.
                    continue
        await self._client.update_attempt(rollout_id, attempt_id, status=status)
