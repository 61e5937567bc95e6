"""Runners on other machines, watched through the workers they register in the store.

Agent-lightning's store keeps a record per runner worker: it stamps the worker's times whenever it
polls for work (``dequeue_rollout``), starts or ends an attempt, or sends a heartbeat
(``update_worker``; the concurrent runner sends one every 10 s, ``LitAgentRunner`` too). A worker
whose record has not changed for ``silence_s`` of this machine's time (so clock skew between
machines does not matter) is taken for dead: the loop ends its rollouts at once as ``runner_died``
instead of waiting out their deadlines. A worker that speaks again is alive again. Nothing here
can restart a remote process, and others may join at any time, so the pool never gives up.
It implements ``ports.runner_pool.RunnerPool``; ``watch()`` refreshes it from the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agentlightning import LightningStore, Worker

logger = logging.getLogger(__name__)

DEFAULT_SILENCE_S = 60.0


def _activity(worker: Worker) -> tuple[float | None, ...]:
    """Every time the store stamps on a worker record; any change means the worker spoke."""
    return (worker.last_heartbeat_time, worker.last_dequeue_time, worker.last_busy_time, worker.last_idle_time)


@dataclass(slots=True)
class _Seen:
    activity: tuple[float | None, ...]
    changed_at: float
    """This machine's monotonic time when ``activity`` last changed."""


class StoreWorkers:
    """The runner workers registered in ``store``, and which have fallen silent."""

    def __init__(
        self,
        store: LightningStore,
        *,
        silence_s: float = DEFAULT_SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if silence_s <= 0:
            raise ValueError(f"silence_s must be positive, got {silence_s}")
        self._store = store
        self._silence_s = silence_s
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._silent: frozenset[str] = frozenset()

    async def refresh(self) -> None:
        """Read every worker record once and update which are silent."""
        workers = await self._store.query_workers()
        now = self._clock()
        for worker in workers:
            activity = _activity(worker)
            seen = self._seen.get(worker.worker_id)
            if seen is None or seen.activity != activity:
                self._seen[worker.worker_id] = _Seen(activity, now)
        silent = frozenset(wid for wid, seen in self._seen.items() if now - seen.changed_at > self._silence_s)
        for worker_id in silent - self._silent:
            logger.warning("runner worker %s silent for over %.0f s; taking it for dead", worker_id, self._silence_s)
        self._silent = silent

    @asynccontextmanager
    async def watch(self, interval_s: float = 2.0) -> AsyncIterator[StoreWorkers]:
        """Refresh every ``interval_s`` in the background while the block runs (a failed read is retried)."""

        async def loop() -> None:
            while True:
                try:
                    await self.refresh()
                except Exception as error:  # a store outage: the rollout loop rides it out and reports it
                    logger.debug("could not read the store's workers: %s", error)
                await asyncio.sleep(interval_s)

        task = asyncio.create_task(loop(), name="store-workers-watch")
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def alive(self) -> int:
        return len(self._seen) - len(self._silent)

    @property
    def given_up(self) -> bool:
        """Never: remote runners may (re)join at any time; the queue deadline bounds the wait."""
        return False

    def first_error(self) -> str | None:
        """Runners elsewhere log to their own output: nothing reaches this process."""
        return None

    def describe(self) -> str:
        return f"{self.alive} of {len(self._seen)} runner workers seen in the store are active"

    def dead_workers(self) -> Collection[str]:
        return self._silent

    def restart(self, worker_id: str) -> None:
        """Nothing to do: a remote process cannot be restarted from here (its rollout is cancelled in the store)."""
