"""Run a batch of rollouts through a store: enqueue, detect completion, reconstruct, never hang.

One loop owns the whole batch. Each tick makes a single ``terminal_statuses`` call for every
pending rollout (no per-rollout polling, no blocking waits); the tick starts at tens of
milliseconds and backs off while nothing changes. At most ``concurrency`` rollouts are in the store
at once. Every rollout has a deadline: one that no runner finishes in time is cancelled in the
store and reported as ``timed_out`` without holding up the others. A terminal status is
snapshotted the first time it is seen; later flips in the store are ignored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from domain.groups import TIMED_OUT, RolloutResult
from domain.trajectory import EMPTY_TRAJECTORY, RewardPolicy, reconstruct_trajectory
from ports.rollout_store import RetryPolicy, RolloutRequest, RolloutStore, SpanT, TripletSource

logger = logging.getLogger(__name__)

DEFAULT_ROLLOUT_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class RolloutOptions:
    """How a batch of rollouts is driven."""

    rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S
    """Deadline per rollout, from its enqueue; past it the rollout is cancelled as ``timed_out``."""
    concurrency: int = 16
    """Most rollouts queued or running in the store at once (across all groups of a batch)."""
    min_tick_s: float = 0.02
    max_tick_s: float = 0.5
    """Idle back-off ceiling of the completion check."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reward_policy: RewardPolicy = field(default_factory=RewardPolicy)
    vocab_size: int | None = None
    """The policy's vocabulary: triplets with ids beyond it are rejected (another model's calls)."""

    def __post_init__(self) -> None:
        if self.rollout_timeout_s <= 0:
            raise ValueError(f"rollout_timeout_s must be positive, got {self.rollout_timeout_s}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 0 < self.min_tick_s <= self.max_tick_s:
            raise ValueError("ticks must satisfy 0 < min_tick_s <= max_tick_s")


DEFAULT_ROLLOUT_OPTIONS = RolloutOptions()


@dataclass(slots=True)
class RolloutStats:
    """What a batch cost, for logs and benchmarks."""

    store_calls: int = 0


OnResult = Callable[[int, RolloutResult], None]


async def run_rollouts(
    requests: Sequence[RolloutRequest],
    *,
    store: RolloutStore[SpanT],
    triplets: TripletSource[SpanT],
    options: RolloutOptions = RolloutOptions(),
    on_result: OnResult | None = None,
    stats: RolloutStats | None = None,
) -> list[RolloutResult]:
    """Run every request to a terminal status or its deadline; results come back in input order."""
    stats = stats if stats is not None else RolloutStats()
    results: list[RolloutResult | None] = [None] * len(requests)
    pending: dict[str, tuple[int, float]] = {}
    next_request = 0
    tick = options.min_tick_s

    def record(index: int, result: RolloutResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    async def finish(index: int, rollout_id: str, status: str) -> None:
        spans = await store.latest_spans(rollout_id)
        stats.store_calls += 1
        trajectory = reconstruct_trajectory(triplets.adapt(spans), options.reward_policy, options.vocab_size)
        record(index, RolloutResult(rollout_id=rollout_id, status=status, trajectory=trajectory))

    while next_request < len(requests) or pending:
        progressed = False
        free = options.concurrency - len(pending)
        if free > 0 and next_request < len(requests):
            chunk = requests[next_request : next_request + free]
            ids = await store.enqueue_many(chunk, options.retry)
            stats.store_calls += 1
            deadline = time.monotonic() + options.rollout_timeout_s
            for offset, rollout_id in enumerate(ids):
                pending[rollout_id] = (next_request + offset, deadline)
            next_request += len(chunk)
            progressed = True

        terminal = await store.terminal_statuses(list(pending))
        stats.store_calls += 1
        if terminal:
            progressed = True
            done = [(pending.pop(rid), rid, status) for rid, status in terminal.items() if rid in pending]
            await asyncio.gather(*(finish(index, rid, status) for (index, _), rid, status in done))

        now = time.monotonic()
        expired = [rid for rid, (_, deadline) in pending.items() if deadline <= now]
        if expired:
            progressed = True
            await store.cancel(expired)
            stats.store_calls += len(expired)
            for rid in expired:
                index, _ = pending.pop(rid)
                logger.warning("rollout %s passed its %.1fs deadline; cancelled", rid, options.rollout_timeout_s)
                record(index, RolloutResult(rollout_id=rid, status=TIMED_OUT, trajectory=EMPTY_TRAJECTORY))

        if pending:
            tick = options.min_tick_s if progressed else min(tick * 2, options.max_tick_s)
            nearest = min(deadline for _, deadline in pending.values()) - time.monotonic()
            await asyncio.sleep(max(0.0, min(tick, nearest)))
    return [r for r in results if r is not None]
