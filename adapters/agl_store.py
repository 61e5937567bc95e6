"""The rollout-store port on Agent-lightning's real stores.

Works for any ``LightningStore``: the embedded ``InMemoryLightningStore``, a
``LightningStoreClient`` talking to ``agl store`` / ``LightningStoreServer`` on another machine,
and ``MongoLightningStore``. Completion is learned with one ``wait_for_rollouts(timeout=0)`` call
for all pending ids: an instant check that never parks executor threads and that the HTTP
client accepts (it refuses ``timeout > 0.1``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from agentlightning import LightningStore, NamedResources, RolloutConfig, Span, TraceToTripletBase
from agentlightning.types import EnqueueRolloutRequest

from domain.triplets import RawTriplet
from ports.rollout_store import RetryPolicy, RolloutRequest

_TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


def rollout_config(retry: RetryPolicy) -> RolloutConfig:
    """Agent-lightning's retry/timeout record for a ``RetryPolicy``."""
    return RolloutConfig(
        timeout_seconds=retry.attempt_timeout_s,
        unresponsive_seconds=retry.unresponsive_s,
        max_attempts=retry.max_attempts,
        retry_condition=list(retry.retry_on) if retry.max_attempts > 1 else [],
    )


class AglRolloutStore:
    """``ports.rollout_store.RolloutStore`` over an Agent-lightning ``LightningStore``."""

    def __init__(self, store: LightningStore) -> None:
        self.store = store

    async def add_resources(self, resources: Mapping[str, object]) -> str:
        update = await self.store.add_resources(cast(NamedResources, dict(resources)))
        return str(update.resources_id)

    async def enqueue_many(self, requests: Sequence[RolloutRequest], retry: RetryPolicy) -> Sequence[str]:
        config = rollout_config(retry)
        rollouts = await self.store.enqueue_many_rollouts(
            [
                EnqueueRolloutRequest(input=r.task, mode=r.mode, resources_id=r.resources_id, config=config)
                for r in requests
            ]
        )
        return [r.rollout_id for r in rollouts]

    async def terminal_statuses(self, rollout_ids: Sequence[str]) -> Mapping[str, str]:
        if not rollout_ids:
            return {}
        done = await self.store.wait_for_rollouts(rollout_ids=list(rollout_ids), timeout=0)
        return {r.rollout_id: str(r.status) for r in done if r.status in _TERMINAL}

    async def latest_spans(self, rollout_id: str) -> Sequence[Span]:
        return list(await self.store.query_spans(rollout_id, "latest"))

    async def cancel(self, rollout_ids: Sequence[str]) -> None:
        for rollout_id in rollout_ids:
            try:
                await self.store.update_rollout(rollout_id, status="cancelled")
            except ValueError:
                continue  # unknown or already gone: nothing left to stop


class AglTripletSource:
    """``ports.rollout_store.TripletSource`` over an Agent-lightning ``TraceToTripletBase``."""

    def __init__(self, adapter: TraceToTripletBase) -> None:
        self.adapter = adapter

    def adapt(self, spans: Sequence[Span]) -> Sequence[RawTriplet]:
        if not spans:
            return []  # the adapters raise ValueError on an empty trace
        triplets = self.adapter.adapt(list(spans))
        return [RawTriplet(prompt=t.prompt, response=t.response, reward=t.reward) for t in triplets]
