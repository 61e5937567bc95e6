"""A runner that executes many rollouts of the user's agent at once in one process.

Agent-lightning 0.3.0's ``LitAgentRunner`` runs one rollout per process: its tracer is made the
process's active tracer for the length of a rollout, and its span processor holds one rollout id at
a time. Here one tracer stays active while any rollout runs, and its span processor reads the
rollout from a ``ContextVar`` set in each rollout's own asyncio task (``asyncio`` copies it into
child tasks and ``asyncio.to_thread``), so the spans of concurrent rollouts never mix. Everything
else is Agent-lightning's: the store's queue (``dequeue_rollout`` under this process's worker id),
its span type and sequence ids, ``emit_reward`` and the ``@agl.rollout`` agent's own
``training_rollout``/``validation_rollout`` (a ``ProxyLLM`` resource still becomes the rollout's own
endpoint URL). A rollout's spans are written when it ends, before
its attempt is marked finished, so the loop reading a terminal status finds them: over HTTP in one
request with the status (``adapters.agl.finish``), in process with ``add_many_spans``.

Async agents run as tasks; sync agents on a thread pool of ``concurrency`` threads. A rollout that
ends in the store while it runs (the loop cancelled it at its deadline) is cancelled here too: an
async agent at once; a sync agent's thread cannot be stopped, so its slot stays taken until the
call returns, and a process whose every slot is held that way exits (``HUNG_EXIT_CODE``) for its
supervisor to restart it. The trace carries what the agent emits (rewards, operations, spans of any
OpenTelemetry instrumentation on the global provider); the policy endpoint records the tokens.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import opentelemetry.trace as trace_api
from agentlightning import AttemptedRollout, LightningStore, LightningStoreClient, LitAgent, Span
from agentlightning.emitter.reward import emit_reward, get_reward_value
from agentlightning.execution import MultiprocessingEvent, ThreadingEvent
from agentlightning.tracer import OtelTracer
from agentlightning.tracer.base import clear_active_tracer, get_active_tracer, set_active_tracer
from agentlightning.types import NamedResources, SpanCoreFields
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import TracerProvider as TracerProviderImpl
from opentelemetry.trace import SpanKind, StatusCode

from adapters.agl.dequeue import WaitingDequeue
from adapters.agl.finish import AttemptEnd, FinishingClient
from adapters.langchain.tracing import instrument_langchain

logger = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 32
HUNG_EXIT_CODE = 75
"""Exit code of a runner process whose every slot is held by a cancelled sync agent that never returned."""
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
AGENT_ERROR = "agl_tinker_agent_error"
"""A log record's attribute that marks what the agent's code reported as an error below ERROR level (a span's)."""


@dataclass(slots=True)
class _Scope:
    """The rollout attempt a task runs, and the spans its code ended so far."""

    rollout_id: str
    attempt_id: str
    store: LightningStore | None = None
    spans: list[ReadableSpan] = field(default_factory=list)
    numbers: dict[int, int] = field(default_factory=dict)
    """Sequence ids the store gave spans as they ended (rewards), by index in ``spans``."""

    def add(self, span: ReadableSpan) -> None:
        if self.store is not None and _is_reward(span):
            number = _store_number(self.store, self.rollout_id, self.attempt_id)
            if number is None:
                span = _order_unknown(span)
            else:
                self.numbers[len(self.spans)] = number
        self.spans.append(span)


REWARD_ORDER_UNKNOWN = "agl_tinker.reward_order_unknown"
"""Marks a reward the store could not number when it was emitted (``adapters.endpoint.triplets`` counts it)."""
NUMBER_TIMEOUT_S = 10.0


def _is_reward(span: ReadableSpan) -> bool:
    return get_reward_value(span) is not None


class _NumberingLoop:
    """An event loop on a thread of its own, where a span's sequence id is taken while the agent waits.

    ``on_end`` runs inside the agent's code (``agl.emit_reward``), often on the runner's own event loop,
    which cannot wait on itself; Agent-lightning's ``LightningSpanProcessor`` writes spans the same way.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, make: Callable[[], Coroutine[object, object, int]], timeout: float) -> int:
        loop = self._started()
        if threading.current_thread() is self._thread:
            raise RuntimeError("a span ended on the numbering loop itself")
        return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="agl-tinker-numbering", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop


_numbering = _NumberingLoop()


def _store_number(store: LightningStore, rollout_id: str, attempt_id: str) -> int | None:
    """The store's next sequence id for the attempt, taken now (the agent waits a round trip); ``None`` on failure."""
    try:
        return _numbering.run(lambda: store.get_next_span_sequence_id(rollout_id, attempt_id), NUMBER_TIMEOUT_S)
    except Exception as error:
        logger.warning(
            "rollout %s: a reward could not be numbered when emitted (%s); its order is unknown", rollout_id, error
        )
        return None


def _order_unknown(span: ReadableSpan) -> ReadableSpan:
    attributes = {**(span.attributes or {}), REWARD_ORDER_UNKNOWN: True}
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


_current_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("agl_tinker_rollout", default=None)


class _ScopedSpanProcessor(SpanProcessor):
    """Files each ended span under the rollout of the context that ended it.

    A span ended where no rollout context reaches (a thread the agent started itself) goes to the
    only open rollout when there is exactly one, as ``LitAgentRunner`` would file it; with several
    open it cannot be attributed, and is dropped and counted in ``unscoped``. A server's spans are
    never filed so: a request a server in this process handles outside every rollout's context (a
    store server beside an in-process runner; FastAPI traces its requests natively whenever a
    tracer provider is set) is that server's work, not an agent's.
    """

    def __init__(self) -> None:
        self.unscoped = 0
        self.open: list[_Scope] = []
        self.lock = threading.Lock()
        self._serving: set[int] = set()
        """Span ids of unscoped server spans and their descendants, while they are open."""

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        if _current_scope.get() is not None:
            return
        parent = span.parent
        if span.kind == SpanKind.SERVER or (parent is not None and parent.span_id in self._serving):
            self._serving.add(span.get_span_context().span_id)

    def on_end(self, span: ReadableSpan) -> None:
        scope = _current_scope.get()
        if scope is None and span.context is not None and span.context.span_id in self._serving:
            self._serving.discard(span.context.span_id)
            return
        if scope is None:
            with self.lock:
                only = self.open[0] if len(self.open) == 1 else None
                if only is None:
                    self.unscoped += 1
                    if self.unscoped == 1:
                        logger.warning("a span (%s) ended outside any rollout's context: dropped", span.name)
                    return
            scope = only
        scope.add(span)


class ConcurrentTracer(OtelTracer):  # type: ignore[misc]  # agentlightning is untyped
    """An Agent-lightning ``OtelTracer`` whose trace context is per asyncio task, not per process.

    ``trace_context`` may be entered by many rollouts at once; the tracer is the process's active
    tracer (what ``agl.emit_reward`` writes to) while at least one of them is open.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tracer_provider: TracerProviderImpl | None = None
        self._processor = _ScopedSpanProcessor()
        self._langchain_handler: Any = None

    def _initialize_tracer_provider(self, worker_id: int) -> None:
        if self._tracer_provider is not None:
            return
        provider = TracerProviderImpl()
        provider.add_span_processor(self._processor)
        self._tracer_provider = provider
        # Instrumentations (OpenInference, OpenLLMetry, ...) write to the global provider: be it, if it is free.
        trace_api.set_tracer_provider(provider)
        if trace_api.get_tracer_provider() is not provider:
            logger.info("another OpenTelemetry provider is global; only spans made through this tracer are kept")
        # LangChain/LangGraph runs as agent spans (which node made each call, for agent_match), on every run.
        self._langchain_handler = instrument_langchain(provider)
        self._initialized = True

    def get_langchain_handler(self) -> Any:
        """The LangChain callback handler (``adapters.langchain.spans``; None without LangChain) that Agent-lightning's
        LangGraph agents pass as a callback. It is on every LangChain run of the process already."""
        return self._langchain_handler

    get_langchain_callback_handler = get_langchain_handler  # AgentOpsTracer's alias, which spider's agent calls

    @asynccontextmanager
    async def trace_context(
        self,
        name: str | None = None,
        *,
        store: LightningStore | None = None,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
    ) -> AsyncGenerator[trace_api.Tracer, None]:
        """Collect the spans ended in this task (and the tasks and threads it starts) for one attempt.

        With ``store``, a reward takes the store's next sequence id as it is emitted, so it is ordered
        after the calls whose replies the agent had read, on any clock (``domain.reward_order``).
        """
        if rollout_id is None or attempt_id is None:
            raise ValueError("a concurrent trace context needs the rollout and attempt ids")
        scope = _Scope(rollout_id, attempt_id, store)
        token = _current_scope.set(scope)
        self._activate(scope)
        try:
            yield trace_api.get_tracer(__name__, tracer_provider=self._get_tracer_provider())
        finally:
            self._deactivate(scope)
            _current_scope.reset(token)

    def get_last_trace(self) -> list[Span]:
        """The spans of the current task's rollout so far (sequence ids are given when they are stored)."""
        scope = _current_scope.get()
        if scope is None:
            return []
        return [Span.from_opentelemetry(s, scope.rollout_id, scope.attempt_id, i) for i, s in enumerate(scope.spans)]

    def _activate(self, scope: _Scope) -> None:
        with self._processor.lock:
            if not self._processor.open:
                if get_active_tracer() is not None:
                    raise RuntimeError("another tracer is active in this process; run LitAgentRunner elsewhere")
                set_active_tracer(self)
            self._processor.open.append(scope)

    def _deactivate(self, scope: _Scope) -> None:
        with self._processor.lock:
            self._processor.open.remove(scope)
            if not self._processor.open:
                clear_active_tracer()

    @staticmethod
    def scope_spans() -> list[ReadableSpan]:
        """The OpenTelemetry spans ended so far in the current rollout's context."""
        scope = _current_scope.get()
        return list(scope.spans) if scope is not None else []

    @staticmethod
    def scope_numbers() -> dict[int, int]:
        """The sequence ids the store gave spans as they ended, by index in ``scope_spans()``."""
        scope = _current_scope.get()
        return dict(scope.numbers) if scope is not None else {}


_shared_tracer: ConcurrentTracer | None = None
_shared_lock = threading.Lock()


def shared_tracer() -> ConcurrentTracer:
    """One tracer per process: OpenTelemetry has one global provider, and every runner here routes by context."""
    global _shared_tracer
    with _shared_lock:
        if _shared_tracer is None:
            _shared_tracer = ConcurrentTracer()
            _shared_tracer.init_worker(0)
        return _shared_tracer


def _as_spans(result: object, rollout: AttemptedRollout) -> list[Span | SpanCoreFields | ReadableSpan]:
    """What the agent's return value adds to the trace: a reward span, or spans it made itself."""
    if result is None:
        return []
    if isinstance(result, bool | int | float):
        return [emit_reward(float(result), propagate=False)]
    if isinstance(result, list) and all(isinstance(s, Span | SpanCoreFields | ReadableSpan) for s in result):
        return list(result)
    raise TypeError(
        f"rollout {rollout.rollout_id}: the agent returned a {type(result).__name__}; "
        "expected None, a number (the reward) or a list of spans"
    )


class ConcurrentRunner:
    """Takes up to ``concurrency`` rollouts from ``store`` and runs them at once, until ``stop``."""

    def __init__(
        self,
        agent: LitAgent[Any],
        store: LightningStore,
        *,
        worker_id: str,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval_s: float = 0.05,
        status_check_s: float = 0.5,
        heartbeat_s: float = 10.0,
        exit_when_hung: bool = False,
    ) -> None:
        """``exit_when_hung``: leave the process (``HUNG_EXIT_CODE``) once cancelled sync agents hold every slot."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self._agent = agent
        self._store = store
        self._finishing = FinishingClient(store) if isinstance(store, LightningStoreClient) else None
        """Over HTTP: a finished rollout in one request (``adapters.agl.finish``); in process: direct calls."""
        self._dequeue = WaitingDequeue(store, status_check_s) if isinstance(store, LightningStoreClient) else None
        """Over HTTP: a dequeue the server holds until a rollout comes (``adapters.agl.dequeue``), at most one
        status-check interval so that ended rollouts are still looked for on time; in process: direct calls."""
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._poll_interval_s = poll_interval_s
        self._status_check_s = status_check_s
        self._heartbeat_s = heartbeat_s
        self._exit_when_hung = exit_when_hung
        self._tracer = shared_tracer()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._abandoned: set[str] = set()
        """Rollouts ended elsewhere whose sync agent still holds a thread."""
        self._failures_seen: set[str] = set()
        """Agent errors whose traceback this runner has logged (a repeat gets one line)."""
        self._resources: dict[str, NamedResources] = {}
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"{worker_id}-agent")
        self.finished = 0

    @property
    def in_flight(self) -> int:
        return len(self._running)

    async def run(self, stop: ThreadingEvent | MultiprocessingEvent) -> None:
        """Serve rollouts until ``stop`` is set; the rollouts in flight then finish first."""
        self._agent.set_runner(self)  # the agent only reads get_worker_id and tracer
        last_status_check = last_heartbeat = 0.0
        try:
            while not stop.is_set():
                took = await self._take()
                now = time.monotonic()
                if self._running and now - last_status_check >= self._status_check_s:
                    last_status_check = now
                    await self._cancel_ended()
                if now - last_heartbeat >= self._heartbeat_s:
                    last_heartbeat = now
                    await self._heartbeat()
                if not took and not (self._dequeue is not None and self._dequeue.waited):
                    await asyncio.sleep(self._poll_interval_s)
            if self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)
        finally:
            for task in self._running.values():
                task.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _take(self) -> bool:
        """Dequeue while slots are free; whether anything was taken.

        One rollout a call (``dequeue_many_rollouts`` measured no faster in ``bench/bench_throughput.py``):
        between calls other runner processes get their turn at the queue, so a batch spreads over the
        processes instead of going whole to the first that polls.
        """
        took = False
        while len(self._running) < self._concurrency:
            rollout = await (
                self._store.dequeue_rollout(worker_id=self._worker_id)
                if self._dequeue is None
                else self._dequeue.dequeue(self._worker_id)
            )
            if rollout is None:
                break
            took = True
            task = asyncio.create_task(self._execute(rollout), name=f"rollout-{rollout.rollout_id}")
            self._running[rollout.rollout_id] = task
            task.add_done_callback(self._forget(rollout.rollout_id))
        return took

    def _forget(self, rollout_id: str) -> Callable[[asyncio.Task[None]], None]:
        def forget(_: asyncio.Task[None]) -> None:
            self._running.pop(rollout_id, None)

        return forget

    async def _resources_of(self, rollout: AttemptedRollout) -> NamedResources | None:
        resources_id = rollout.resources_id
        if resources_id is not None and resources_id in self._resources:
            return self._resources[resources_id]
        update = (
            await self._store.get_resources_by_id(resources_id)
            if resources_id
            else await self._store.get_latest_resources()
        )
        if update is None:
            return None
        self._resources[update.resources_id] = update.resources
        return update.resources

    async def _execute(self, rollout: AttemptedRollout) -> None:
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        status = "failed"
        traced: list[ReadableSpan] = []
        numbers: dict[int, int] = {}
        spans: list[Span | SpanCoreFields | ReadableSpan] = []
        try:
            resources = await self._resources_of(rollout)
            if resources is None:
                raise RuntimeError(f"resources {rollout.resources_id!r} of rollout {rollout_id} are not in the store")
            async with self._tracer.trace_context(store=self._store, rollout_id=rollout_id, attempt_id=attempt_id):
                try:
                    result = await self._call_agent(rollout, resources)
                finally:
                    traced, numbers = ConcurrentTracer.scope_spans(), ConcurrentTracer.scope_numbers()
            spans = [*traced, *_as_spans(result, rollout)]
            status = "succeeded"
            self._log_span_error(rollout_id, traced)
        except asyncio.CancelledError:
            logger.warning("rollout %s ended in the store while running; its agent was cancelled", rollout_id)
            return
        except Exception as error:
            self._log_agent_failure(rollout_id, error)
            spans = list(traced)  # what it emitted before failing stays in its trace
        await self._finish(rollout, spans, status, numbers)

    def _log_agent_failure(self, rollout_id: str, error: Exception) -> None:
        """The traceback the first time an error is seen in this runner, one line each time it repeats."""
        key = f"{type(error).__name__}: {error}"
        if key in self._failures_seen:
            logger.warning(
                "rollout %s: the agent raised the same %s again (its traceback is above)",
                rollout_id,
                type(error).__name__,
            )
            return
        if len(self._failures_seen) < 1000:
            self._failures_seen.add(key)
        logger.exception("rollout %s: the agent raised", rollout_id)

    def _log_span_error(self, rollout_id: str, traced: Sequence[ReadableSpan]) -> None:
        """The first span of a succeeded rollout that ended with an error (an exception the agent's framework
        caught and recorded), logged once per distinct error: the trainer shows the first (``AGENT_ERROR``)."""
        for span in traced:
            if span.status.status_code is not StatusCode.ERROR:
                continue
            described = span.status.description or next(
                (
                    f"{event.attributes.get('exception.type', '')}: {event.attributes.get('exception.message', '')}"
                    for event in span.events
                    if event.name == "exception" and event.attributes
                ),
                "",
            )
            key = f"span {span.name!r}: {described}"
            if key not in self._failures_seen and len(self._failures_seen) < 1000:
                self._failures_seen.add(key)
                logger.warning("rollout %s: %s", rollout_id, key, extra={AGENT_ERROR: True})
            return

    async def _call_agent(self, rollout: AttemptedRollout, resources: NamedResources) -> object:
        agent = self._agent
        train = rollout.mode == "train"
        if agent.is_async():
            method = agent.training_rollout_async if train else agent.validation_rollout_async
            return await method(rollout.input, resources=resources, rollout=rollout)
        sync_method = agent.training_rollout if train else agent.validation_rollout
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._executor, lambda: context.run(sync_method, rollout.input, resources=resources, rollout=rollout)
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._abandon(rollout.rollout_id, future)
            raise

    def _abandon(self, rollout_id: str, future: asyncio.Future[object]) -> None:
        """A cancelled sync agent keeps its thread; when such threads hold every slot, give the process up."""
        self._abandoned.add(rollout_id)
        future.add_done_callback(lambda _: self._abandoned.discard(rollout_id))
        if self._exit_when_hung and len(self._abandoned) >= self._concurrency:
            logger.error("%d sync agents ignore cancellation and hold every slot; exiting", len(self._abandoned))
            os._exit(HUNG_EXIT_CODE)

    async def _finish(
        self,
        rollout: AttemptedRollout,
        made: Sequence[Span | SpanCoreFields | ReadableSpan],
        status: str,
        numbers: Mapping[int, int],
    ) -> None:
        """Store the rollout's spans, then its attempt's status (in that order: the loop reads both).

        Spans the store numbered as they ended (``numbers``, by index in ``made``) keep their sequence id;
        the others, the reward the agent returned included, are numbered now, after every call it made.

        The status is written whatever happened to the spans, so the rollout never waits out its
        deadline; a rollout whose spans could not be stored is marked failed.
        """
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        end: AttemptEnd = "succeeded" if status == "succeeded" else "failed"
        try:
            if self._finishing is not None:  # the server numbers the others
                stored = [_stored(s, rollout_id, attempt_id, numbers.get(i, 0)) for i, s in enumerate(made)]
                await self._finishing.finish(rollout_id, attempt_id, stored, end, numbered=numbers.keys())
                self.finished += 1
                return
            if made:
                fresh = [i for i in range(len(made)) if i not in numbers]
                sequence_ids = await self._store.get_many_span_sequence_ids([(rollout_id, attempt_id)] * len(fresh))
                given = {**numbers, **dict(zip(fresh, sequence_ids, strict=True))}
                await self._store.add_many_spans(
                    [_stored(s, rollout_id, attempt_id, given[i]) for i, s in enumerate(made)]
                )
        except Exception:
            logger.exception("rollout %s: could not store its spans; marking it failed", rollout_id)
            end = "failed"
        try:
            await self._store.update_attempt(rollout_id, attempt_id, status=end)
        except Exception:
            logger.exception("rollout %s: could not store its status", rollout_id)
        self.finished += 1

    async def _cancel_ended(self) -> None:
        """Cancel the agents of rollouts that ended in the store while running (timed out, cancelled)."""
        ids = list(self._running)
        try:
            # Per-id lookups: a query by ``rollout_id_in`` scans every rollout the store ever held.
            ended = await self._store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        except Exception as error:
            logger.warning("could not check the status of %d running rollouts: %s", len(ids), error)
            return
        for rollout in ended:
            task = self._running.get(rollout.rollout_id)
            if task is not None and rollout.status in TERMINAL:
                task.cancel()

    async def _heartbeat(self) -> None:
        try:
            await self._store.update_worker(
                self._worker_id, {"in_flight": len(self._running), "concurrency": self._concurrency}
            )
        except Exception as error:
            logger.debug("heartbeat failed: %s", error)

    # What ``LitAgent`` asks of its runner.
    def get_worker_id(self) -> str:
        return self._worker_id

    @property
    def tracer(self) -> ConcurrentTracer:
        return self._tracer


def _stored(span: Span | SpanCoreFields | ReadableSpan, rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
    if isinstance(span, Span):
        return span.model_copy(update={"rollout_id": rollout_id, "attempt_id": attempt_id, "sequence_id": sequence_id})
    if isinstance(span, SpanCoreFields):
        return Span.from_core_fields(span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
    return Span.from_opentelemetry(span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
