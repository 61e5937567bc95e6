"""Run a batch of rollouts through a store: enqueue, detect completion, reconstruct, never hang.

One loop owns the whole batch. Each tick makes a single ``terminal_statuses`` call for every
pending rollout (no per-rollout polling, no blocking waits); the tick starts at tens of
milliseconds and backs off while nothing changes. At most ``concurrency`` rollouts are in the store
at once. Every rollout has two deadlines: ``queue_timeout_s`` to be taken by a runner (a runner
starting up slowly loses nothing), then ``rollout_timeout_s`` from the moment its attempt started
(seen by one batched ``taken`` call every ``start_check_s`` while some rollout still waits, and timed by
this machine's monotonic clock from the check before, never by the store's, which may be another
machine's). A
rollout that misses either is cancelled in the store and reported as ``timed_out`` without holding up
the others. With a ``RunnerPool`` (runner processes this run started), a rollout whose runner process
died ends at once as ``failed``, a hung agent's process is restarted, and a pool that gave up every
runner ends the batch with ``NoRunners`` within a tick. A terminal status is
snapshotted the first time it is seen; later flips in the store are ignored. Once a finished
rollout's trajectory is rebuilt, the endpoint that served it drops what it held for it, and with
``forget_finished`` so does the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from domain.groups import TIMED_OUT, RolloutResult
from domain.trajectory import EMPTY_TRAJECTORY, RewardPolicy, reconstruct_trajectory
from ports.policy_endpoint import PolicyServer
from ports.rollout_store import RetryPolicy, RolloutRequest, RolloutStore, SpanT, TripletSource
from ports.runner_pool import RunnerPool

logger = logging.getLogger(__name__)

DEFAULT_ROLLOUT_TIMEOUT_S = 600.0
DEFAULT_QUEUE_TIMEOUT_S = 600.0

QUEUE_TIMEOUT = "queue_timeout"
"""``RolloutResult.reason``: no runner took the rollout within ``queue_timeout_s``."""
RUN_TIMEOUT = "run_timeout"
"""``RolloutResult.reason``: the runner did not finish within ``rollout_timeout_s`` of starting it."""
RUNNER_DIED = "runner_died"
"""``RolloutResult.reason``: the runner process executing it died (status ``failed``)."""


FORGETTABLE = frozenset({"succeeded", "failed"})
"""Terminal statuses a runner writes last: nothing writes to such a rollout again."""


class NoRunners(RuntimeError):
    """Every runner process of the run died repeatedly and was given up: no rollout can run."""


@dataclass(frozen=True, slots=True)
class RolloutOptions:
    """How a batch of rollouts is driven."""

    rollout_timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S
    """Deadline per rollout, from when a runner starts it; past it the rollout is cancelled as ``timed_out``."""
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    """Longest wait in the queue for a runner to take the rollout (generous: runners may start slowly)."""
    concurrency: int = 16
    """Most rollouts queued or running in the store at once (across all groups of a batch)."""
    min_tick_s: float = 0.02
    max_tick_s: float = 0.5
    """Idle back-off ceiling of the completion check."""
    start_check_s: float = 0.25
    """How often queued rollouts are checked for having been taken (their running deadline starts then)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    reward_policy: RewardPolicy = field(default_factory=RewardPolicy)
    vocab_size: int | None = None
    """The policy's vocabulary: triplets with ids beyond it are rejected (another model's calls)."""
    runners: RunnerPool | None = field(default=None, compare=False)
    """The runner processes this run supervises; ``None`` when runners live elsewhere (nothing to watch)."""
    endpoint: PolicyServer | None = field(default=None, compare=False)
    """The endpoint serving these rollouts: it drops what it holds for each one that succeeded or failed."""
    sampling_seed: int | None = None
    """The run's seed: ``rollout_groups`` derives each rollout's sampling seed from it and the rollout's place in
    its batch, so a rollout samples the same tokens whichever order the requests of concurrent rollouts arrive in
    (None: each request's seed comes from arrival order)."""
    forget_finished: bool = False
    """Drop a rollout that succeeded or failed from the store once its trajectory is rebuilt (nothing reads
    it again: a resumed run rolls its tasks out anew), so a long run's memory stays flat. Rollouts that timed
    out or were cancelled stay: their runner may still write to them."""

    def __post_init__(self) -> None:
        if self.rollout_timeout_s <= 0:
            raise ValueError(f"rollout_timeout_s must be positive, got {self.rollout_timeout_s}")
        if self.queue_timeout_s <= 0:
            raise ValueError(f"queue_timeout_s must be positive, got {self.queue_timeout_s}")
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


@dataclass(slots=True)
class _Pending:
    """A rollout in the store: its place in the batch and its current deadline (queue, then run)."""

    index: int
    enqueued_at: float
    deadline: float
    started: bool = False
    worker_id: str | None = None


async def run_rollouts(
    requests: Sequence[RolloutRequest],
    *,
    store: RolloutStore[SpanT],
    triplets: TripletSource[SpanT],
    options: RolloutOptions = RolloutOptions(),
    on_result: OnResult | None = None,
    stats: RolloutStats | None = None,
) -> list[RolloutResult]:
    """Run every request to a terminal status or its deadline; results come back in input order.

    Raises ``NoRunners`` when ``options.runners`` has given up every runner process.
    """
    stats = stats if stats is not None else RolloutStats()
    results: list[RolloutResult | None] = [None] * len(requests)
    pending: dict[str, _Pending] = {}
    runners = options.runners
    next_request = 0
    tick = options.min_tick_s
    last_start_check = -float("inf")

    def record(index: int, result: RolloutResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    async def finish(index: int, rollout_id: str, status: str) -> None:
        spans = await store.latest_spans(rollout_id)
        stats.store_calls += 1
        trajectory = reconstruct_trajectory(triplets.adapt(spans), options.reward_policy, options.vocab_size)
        record(index, RolloutResult(rollout_id=rollout_id, status=status, trajectory=trajectory))

    async def give_up(rollout_ids: Sequence[str], status: str, reason: str) -> None:
        await store.cancel(rollout_ids)
        stats.store_calls += len(rollout_ids)
        for rid in rollout_ids:
            entry = pending.pop(rid)
            record(entry.index, RolloutResult(rid, status, EMPTY_TRAJECTORY, reason))

    while next_request < len(requests) or pending:
        if runners is not None and runners.given_up:
            await store.cancel(list(pending))  # nobody will run them; do not leave them queued
            raise NoRunners(f"no runner process left to run rollouts ({runners.describe()})")
        progressed = False
        free = options.concurrency - len(pending)
        if free > 0 and next_request < len(requests):
            chunk = requests[next_request : next_request + free]
            ids = await store.enqueue_many(chunk, options.retry)
            stats.store_calls += 1
            seeds = {rid: r.seed for rid, r in zip(ids, chunk, strict=True) if r.seed is not None}
            if seeds and options.endpoint is not None:
                options.endpoint.seed_rollouts(seeds)
            enqueued_at = time.monotonic()
            for offset, rollout_id in enumerate(ids):
                pending[rollout_id] = _Pending(
                    next_request + offset, enqueued_at, enqueued_at + options.queue_timeout_s
                )
            next_request += len(chunk)
            progressed = True

        terminal = await store.terminal_statuses(list(pending))
        stats.store_calls += 1
        if terminal:
            progressed = True
            done = [(pending.pop(rid).index, rid, status) for rid, status in terminal.items() if rid in pending]
            await asyncio.gather(*(finish(index, rid, status) for index, rid, status in done))
            finished = [rid for _, rid, status in done if status in FORGETTABLE]
            if finished and options.endpoint is not None:
                options.endpoint.forget(finished)
            if finished and options.forget_finished:
                await store.forget(finished)
                stats.store_calls += 1

        waiting = [rid for rid, entry in pending.items() if not entry.started]
        queue_expired = any(not e.started and e.deadline <= time.monotonic() for e in pending.values())
        if waiting and (queue_expired or time.monotonic() - last_start_check >= options.start_check_s):
            previous_check, last_start_check = last_start_check, time.monotonic()
            taken = await store.taken(waiting)
            stats.store_calls += 1
            for rid, attempt in taken.items():
                entry = pending.get(rid)
                if entry is None or entry.started:
                    continue
                # Taken since the previous check (and after its enqueue), by this machine's clock alone: the
                # store's start_time is another machine's clock when the store is remote.
                started_by = max(previous_check, entry.enqueued_at)
                entry.started, entry.worker_id = True, attempt.worker_id
                entry.deadline = started_by + options.rollout_timeout_s

        if runners is not None:
            dead = runners.dead_workers()
            lost = [rid for rid, entry in pending.items() if entry.worker_id is not None and entry.worker_id in dead]
            if lost:
                progressed = True
                logger.warning("runner process of %d rollout(s) died; ending them: %s", len(lost), ", ".join(lost))
                await give_up(lost, "failed", RUNNER_DIED)

        now = time.monotonic()
        expired = [(rid, entry) for rid, entry in pending.items() if entry.deadline <= now]
        if expired:
            progressed = True
            for rid, entry in expired:
                if entry.started:
                    logger.warning("rollout %s ran past its %.1fs deadline; cancelled", rid, options.rollout_timeout_s)
                    if runners is not None and entry.worker_id is not None:
                        runners.restart(entry.worker_id)  # its agent hangs, and nothing can stop it but a restart
                else:
                    logger.warning("rollout %s waited %.1fs for a runner; cancelled", rid, options.queue_timeout_s)
            for started in (True, False):
                same_kind = [rid for rid, entry in expired if entry.started is started]
                if same_kind:
                    await give_up(same_kind, TIMED_OUT, RUN_TIMEOUT if started else QUEUE_TIMEOUT)

        if pending:
            tick = options.min_tick_s if progressed else min(tick * 2, options.max_tick_s)
            nearest = min(entry.deadline for entry in pending.values()) - time.monotonic()
            await asyncio.sleep(max(0.0, min(tick, nearest)))
    return [r for r in results if r is not None]
