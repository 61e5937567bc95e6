"""The rollout-store port on Agent-lightning's real stores.

Works for any ``LightningStore``: the embedded ``InMemoryLightningStore``, a
``LightningStoreClient`` talking to ``agl store`` / ``LightningStoreServer`` on another machine,
and ``MongoLightningStore``. Completion is learned with one ``wait_for_rollouts(timeout=0)`` call
for all pending ids: an instant check that never parks executor threads and that the HTTP
client accepts (it refuses ``timeout > 0.1``). Connection-level failures are retried with backoff
for ``OutagePolicy.tolerance_s`` (a store restarted empty reports its forgotten rollouts as
``lost``), then ``StoreUnavailable`` names the store and the outage in one line. Trained rollouts
are forgotten where the store allows it (``adapters.agl.forget``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar, cast

import aiohttp
from agentlightning import (
    InMemoryLightningStore,
    LightningStore,
    LightningStoreClient,
    NamedResources,
    RolloutConfig,
    Span,
    TraceToTripletBase,
)
from agentlightning.types import AttemptedRollout, EnqueueRolloutRequest, RolloutStatus

from adapters.agl.forget import ForgettingClient, forget_in_memory
from domain.triplets import RawTriplet
from ports.rollout_store import LOST, RetryPolicy, RolloutRequest, StoreUnavailable, TakenRollout

_TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
_QUEUED = frozenset({"queuing", "requeuing"})
_OUTAGE_STATUSES = frozenset({408, 502, 503, 504})
T = TypeVar("T")
logger = logging.getLogger(__name__)


def rollout_config(retry: RetryPolicy) -> RolloutConfig:
    """Agent-lightning's retry/timeout record for a ``RetryPolicy``."""
    return RolloutConfig(
        timeout_seconds=retry.attempt_timeout_s,
        unresponsive_seconds=retry.unresponsive_s,
        max_attempts=retry.max_attempts,
        retry_condition=list(retry.retry_on) if retry.max_attempts > 1 else [],
    )


@dataclass(frozen=True, slots=True)
class OutagePolicy:
    """How long the adapter rides out a store it cannot reach before giving up."""

    tolerance_s: float = 120.0
    """Longest outage survived; past it a call raises ``StoreUnavailable`` (0: fail at once)."""
    first_delay_s: float = 0.5
    max_delay_s: float = 8.0


def is_connection_failure(error: BaseException) -> bool:
    """Whether ``error`` says the store was unreachable (worth retrying), not that it refused the call."""
    if isinstance(error, aiohttp.ClientResponseError):
        # A proxy in front of a store that is down answers 502-504. 4xx are refusals, and the store server
        # itself answers 500 for an application error (e.g. an unknown rollout): waiting would not help.
        return error.status in _OUTAGE_STATUSES
    return isinstance(error, aiohttp.ClientConnectionError | asyncio.TimeoutError | ConnectionError)


class AglRolloutStore:
    """``ports.rollout_store.RolloutStore`` over an Agent-lightning ``LightningStore``.

    Every call rides out connection failures (a store server restarting, a dropped connection)
    with exponential backoff for up to ``outage.tolerance_s``, logging one line when an outage
    starts and one when it ends. A server restarted empty has forgotten the run's resources and
    rollouts: the latest resources are published again under the same id before any retried call,
    and the rollouts it no longer knows are reported ``LOST`` instead of being waited for.
    """

    def __init__(
        self, store: LightningStore, outage: OutagePolicy | None = None, *, forgets_finished: bool = False
    ) -> None:
        """``forgets_finished``: the run forgets its finished rollouts (``RolloutOptions.forget_finished``), so an
        in-process in-memory store holds little more than the rollouts in flight, and ``terminal_statuses`` asks it
        for the terminal ones among them in one query instead of looking each one up."""
        self.store = store
        self._query_terminal = forgets_finished and isinstance(store, InMemoryLightningStore)
        self.outage = outage or OutagePolicy()
        self.url = str(getattr(store, "server_address_root", type(store).__name__))
        self._outage_since: float | None = None
        self._epoch = 0
        """Outages survived; a rollout last seen in an earlier epoch must be checked for existence."""
        self._seen_in: dict[str, int] = {}
        self._resources: tuple[str, NamedResources] | None = None
        self._forgetting: ForgettingClient | None = None

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        delay = self.outage.first_delay_s
        while True:
            try:
                if self._outage_since is not None:
                    await self._restore_resources()
                result = await operation()
            except Exception as error:
                if not is_connection_failure(error):
                    raise
                delay = await self._wait_out(error, delay)
                continue
            if self._outage_since is not None:
                logger.warning(
                    "store at %s reachable again after %.1fs", self.url, time.monotonic() - self._outage_since
                )
                self._outage_since = None
                self._epoch += 1
            return result

    async def _wait_out(self, error: Exception, delay: float) -> float:
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            logger.warning(
                "store at %s unreachable (%s); retrying for up to %.0fs",
                self.url,
                _describe(error),
                self.outage.tolerance_s,
            )
        elapsed = now - self._outage_since
        if elapsed >= self.outage.tolerance_s:
            raise StoreUnavailable(
                f"the store at {self.url} has been unreachable for {elapsed:.0f}s ({_describe(error)})"
            ) from error
        await asyncio.sleep(min(delay, self.outage.tolerance_s - elapsed))
        return min(delay * 2, self.outage.max_delay_s)

    async def _restore_resources(self) -> None:
        """Publish the latest resources again, under their id, if the store came back without them."""
        if self._resources is None:
            return
        resources_id, resources = self._resources
        if await self.store.get_resources_by_id(resources_id) is None:
            await self.store.update_resources(resources_id, resources)
            logger.warning("store at %s came back without resources %s: published them again", self.url, resources_id)

    async def add_resources(self, resources: Mapping[str, object]) -> str:
        named = cast(NamedResources, dict(resources))
        update = await self._call(lambda: self.store.add_resources(named))
        self._resources = (str(update.resources_id), named)
        return str(update.resources_id)

    async def enqueue_many(self, requests: Sequence[RolloutRequest], retry: RetryPolicy) -> Sequence[str]:
        config = rollout_config(retry)
        batch = [
            EnqueueRolloutRequest(input=r.task, mode=r.mode, resources_id=r.resources_id, config=config)
            for r in requests
        ]
        rollouts = await self._call(lambda: self.store.enqueue_many_rollouts(batch))
        ids = [r.rollout_id for r in rollouts]
        self._seen_in.update((rollout_id, self._epoch) for rollout_id in ids)
        return ids

    async def terminal_statuses(self, rollout_ids: Sequence[str]) -> Mapping[str, str]:
        if not rollout_ids:
            return {}
        ids = list(rollout_ids)
        if self._query_terminal:
            # One pass over the few rollouts held, returning only the finished ones: ~0.2 ms for 64 pending ids,
            # where ``wait_for_rollouts`` looks each one up in a task of its own (~2.4 ms), every tick of the loop.
            terminal: list[RolloutStatus] = ["succeeded", "failed", "cancelled"]
            done = await self._call(lambda: self.store.query_rollouts(status_in=terminal, rollout_id_in=ids))
        else:
            done = await self._call(lambda: self.store.wait_for_rollouts(rollout_ids=ids, timeout=0))
        statuses = {r.rollout_id: str(r.status) for r in done if r.status in _TERMINAL}
        unchecked = [rid for rid in ids if rid not in statuses and self._seen_in.get(rid, 0) < self._epoch]
        if unchecked:
            statuses.update(await self._lost(unchecked))
        for rollout_id in statuses:
            self._seen_in.pop(rollout_id, None)
        return statuses

    async def _lost(self, rollout_ids: list[str]) -> dict[str, str]:
        """``LOST`` for the ids that an outage wiped from the store; the others are marked as seen."""
        epoch = self._epoch
        known = {r.rollout_id for r in await self._call(lambda: self.store.query_rollouts(rollout_id_in=rollout_ids))}
        lost = [rid for rid in rollout_ids if rid not in known]
        self._seen_in.update((rid, epoch) for rid in known)
        if lost:
            logger.warning("the store at %s no longer knows %d rollout(s): counted as lost", self.url, len(lost))
        return dict.fromkeys(lost, LOST)

    async def taken(self, rollout_ids: Sequence[str]) -> Mapping[str, TakenRollout]:
        if not rollout_ids:
            return {}
        ids = list(rollout_ids)
        if isinstance(self.store, LightningStoreClient):  # one request; the server scans its rollouts once
            rollouts = await self._call(lambda: self.store.query_rollouts(rollout_id_in=ids))
        else:  # in process: lookups by id, where a query by ``rollout_id_in`` scans every rollout ever held
            found = await self._call(lambda: asyncio.gather(*(self.store.get_rollout_by_id(rid) for rid in ids)))
            rollouts = [r for r in found if r is not None]
        return {
            r.rollout_id: TakenRollout(worker_id=r.attempt.worker_id)
            for r in rollouts
            if isinstance(r, AttemptedRollout) and r.status not in _QUEUED
        }

    async def latest_spans(self, rollout_id: str) -> Sequence[Span]:
        return list(await self._call(lambda: self.store.query_spans(rollout_id, "latest")))

    async def cancel(self, rollout_ids: Sequence[str]) -> None:
        for rollout_id in rollout_ids:
            self._seen_in.pop(rollout_id, None)
            try:
                await self._call(partial(self.store.update_rollout, rollout_id, status="cancelled"))
            except ValueError:
                continue  # unknown or already gone: nothing left to stop
            except aiohttp.ClientResponseError as error:
                if error.status == 401:
                    raise
                continue  # over HTTP the same ValueError arrives as the server's 500

    async def forget(self, rollout_ids: Sequence[str]) -> None:
        if not rollout_ids:
            return
        ids = list(rollout_ids)
        for rollout_id in ids:
            self._seen_in.pop(rollout_id, None)
        try:
            if isinstance(self.store, InMemoryLightningStore):
                await forget_in_memory(self.store, ids)
            elif isinstance(self.store, LightningStoreClient):
                forgetting = self._forgetting = self._forgetting or ForgettingClient(self.store)
                await self._call(lambda: forgetting.forget(ids))
        except StoreUnavailable:
            raise
        except Exception as error:  # memory, not correctness: the run goes on
            logger.warning("could not forget %d trained rollout(s) in the store at %s: %s", len(ids), self.url, error)


class AglTripletSource:
    """``ports.rollout_store.TripletSource`` over an Agent-lightning ``TraceToTripletBase``."""

    def __init__(self, adapter: TraceToTripletBase) -> None:
        self.adapter = adapter

    def adapt(self, spans: Sequence[Span]) -> Sequence[RawTriplet]:
        if not spans:
            return []  # the adapters raise ValueError on an empty trace
        triplets = self.adapter.adapt(list(spans))
        return [
            RawTriplet(prompt=t.prompt, response=t.response, reward=t.reward, metadata=t.metadata) for t in triplets
        ]

    def take_metrics(self) -> Mapping[str, float]:
        """The adapter's counters since the last call, where it keeps any (``take_metrics``)."""
        take = getattr(self.adapter, "take_metrics", None)
        return dict(take()) if callable(take) else {}


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
