"""Runner processes that execute the user's agent on a store, supervised.

Each process runs a ``ConcurrentRunner`` (``adapters.concurrent_runner``: up to ``concurrency``
rollouts at once) or, with ``concurrency=None``, Agent-lightning's stock ``LitAgentRunner`` (one
rollout at a time, AgentOps tracer: what ``trajectory_source=client`` reads). Processes attach to
the store over HTTP, the way a distributed deployment runs them, and poll it every
``poll_interval`` seconds when idle (50 ms here instead of Agent-lightning's 5 s).

``RunnerProcesses.supervise()`` watches the processes from a thread: a dead one is respawned after
0.5 s, 1 s, 2 s... (capped), under a new store worker id so that the loop can tell the rollouts of the
dead process from the new one's; a slot whose process dies ``max_crashes`` times in a row, each
within ``crash_window_s`` of its start (agent import included), is given up. It implements
``ports.runner_pool.RunnerPool``. Each process gets the store's token in memory (its store client
and its OTLP span exporter send it) and exits when its parent is gone, even after ``kill -9``: the kernel
kills it (``adapters.runner_entry``, armed before any heavy import), and a watch thread polls as a fallback.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, cast

from agentlightning import AgentOpsTracer, LightningStore, LitAgent, LitAgentRunner
from agentlightning.execution import ExecutionEvent

from adapters.concurrent_runner import DEFAULT_CONCURRENCY, HUNG_EXIT_CODE, ConcurrentRunner
from adapters.runner_entry import runner_main
from adapters.store_auth import TokenStoreClient, export_spans_with_token

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 0.05


def load_agent(reference: str) -> LitAgent[Any]:
    """The agent named by ``"package.module:attribute"`` (what runner processes import).

    The working directory is importable, as with ``python -m``: ``agent=my_agent:fn`` finds ``./my_agent.py``.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"agent reference {reference!r} must look like 'package.module:attribute'")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        agent = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot load agent {reference!r}: {error}") from error
    if not isinstance(agent, LitAgent):
        raise ValueError(f"{reference!r} is a {type(agent).__name__}, not an agentlightning agent (@agl.rollout)")
    return agent


def make_runner(poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> LitAgentRunner[Any]:
    """A runner with the AgentOps tracer, which records token ids and logprobs of OpenAI calls."""
    return LitAgentRunner(
        tracer=AgentOpsTracer(),
        poll_interval=poll_interval_s,
        interval_jitter=poll_interval_s / 2,
    )


async def run_runner(
    agent: LitAgent[Any],
    store: LightningStore,
    stop: ExecutionEvent,
    *,
    worker_id: int = 0,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
) -> None:
    """Execute rollouts from ``store`` in this event loop until ``stop`` is set."""
    runner = make_runner(poll_interval_s)
    # Not ``run_context``: agentlightning 0.3.0 passes worker_id=0 to init_worker whatever it is
    # given, so every runner process would register as the same ``Worker-0`` in the store.
    runner.init(agent=agent)
    try:
        runner.init_worker(worker_id=worker_id, store=store)
        try:
            await runner.iter(event=stop)
        finally:
            runner.teardown_worker(worker_id=worker_id)
    finally:
        runner.teardown()


async def run_concurrent_runner(
    agent: LitAgent[Any],
    store: LightningStore,
    stop: ExecutionEvent,
    *,
    worker_id: int = 0,
    concurrency: int,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    exit_when_hung: bool = False,
) -> None:
    """Execute up to ``concurrency`` rollouts at once from ``store`` in this event loop until ``stop`` is set."""
    runner = ConcurrentRunner(
        agent,
        store,
        worker_id=store_worker_id(worker_id),
        concurrency=concurrency,
        poll_interval_s=poll_interval_s,
        exit_when_hung=exit_when_hung,
    )
    await runner.run(stop)


def _exit_with_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Exit when the parent is gone (even after its kill -9): an orphan runner must not outlive its run."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_runner_process(
    parent_pid: int,
    stop: ExecutionEvent,
    agent_reference: str,
    store_url: str,
    worker_id: int,
    poll_interval_s: float,
    token: str | None,
    concurrency: int | None,
) -> None:
    """A runner process's work, after ``adapters.runner_entry`` tied it to its parent."""
    _exit_with_parent(parent_pid)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")  # no "Session Replay" line per rollout
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when runners stop
    export_spans_with_token(token)
    agent = load_agent(agent_reference)

    async def serve() -> None:
        store = TokenStoreClient(store_url, token)
        try:
            if concurrency is None:
                await run_runner(agent, store, stop, worker_id=worker_id, poll_interval_s=poll_interval_s)
            else:
                await run_concurrent_runner(
                    agent,
                    store,
                    stop,
                    worker_id=worker_id,
                    concurrency=concurrency,
                    poll_interval_s=poll_interval_s,
                    exit_when_hung=True,
                )
        finally:
            await store.close()

    asyncio.run(serve())


def store_worker_id(worker_id: int) -> str:
    """The id ``LitAgentRunner`` registers in the store (and puts on its attempts) for ``worker_id``."""
    return f"Worker-{worker_id}"


@dataclass(slots=True)
class _Slot:
    """One runner position: its current process and its recent crashes."""

    process: BaseProcess
    worker_id: int
    started_at: float = field(default_factory=time.monotonic)
    quick_crashes: int = 0
    """Consecutive deaths, each within ``crash_window_s`` of the process's start."""
    restart_at: float | None = None
    """While dead: when to respawn (monotonic)."""
    kill_requested: bool = False
    """Killed on purpose (hung agent): respawn at once, not counted as a crash."""
    given_up: bool = False


class RunnerProcesses:
    """``n`` runner processes attached to a store by URL (they stand in for other machines)."""

    def __init__(
        self,
        agent_reference: str,
        store_url: str,
        n: int,
        *,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        token: str | None = None,
        concurrency: int | None = DEFAULT_CONCURRENCY,
        max_crashes: int = 3,
        crash_window_s: float = 60.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        check_interval_s: float = 0.1,
    ) -> None:
        """``token``: the store's shared secret (``adapters.store_auth``), handed to the children in memory.

        ``concurrency``: rollouts each process runs at once (``None``: the stock one-at-a-time ``LitAgentRunner``).
        """
        if n < 1:
            raise ValueError(f"need at least one runner, got {n}")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"runner concurrency must be at least 1, got {concurrency}")
        self._concurrency = concurrency
        load_agent(agent_reference)  # fail here, with a clear message, rather than in n children
        self._context = multiprocessing.get_context("spawn")
        self._stop = self._context.Event()
        """A plain multiprocessing event: unpickling it in the child imports nothing heavy."""
        self._args = (agent_reference, store_url, poll_interval_s, token)
        self._max_crashes, self._crash_window_s = max_crashes, crash_window_s
        self._backoff_s, self._max_backoff_s, self._check_interval_s = backoff_s, max_backoff_s, check_interval_s
        self._slots = [_Slot(self._process(worker_id), worker_id) for worker_id in range(n)]
        self._next_worker_id = n
        self._lock = threading.Lock()
        self._dead: set[str] = set()
        self._restarts = 0
        self._last_exitcode: int | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def _process(self, worker_id: int) -> BaseProcess:
        agent_reference, store_url, poll_interval_s, token = self._args
        return self._context.Process(
            target=runner_main,
            args=(
                os.getpid(),
                self._stop,
                agent_reference,
                store_url,
                worker_id,
                poll_interval_s,
                token,
                self._concurrency,
            ),
            name=f"agl-runner-{worker_id}",
            daemon=True,
        )

    @property
    def _processes(self) -> Sequence[BaseProcess]:
        return [slot.process for slot in self._slots]

    def start(self) -> RunnerProcesses:
        now = time.monotonic()
        for slot in self._slots:
            slot.process.start()
            slot.started_at = now
        return self

    def supervise(self) -> RunnerProcesses:
        """Restart dead processes from a background thread until ``stop``."""
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="agl-runner-supervisor", daemon=True)
            self._supervisor.start()
        return self

    def _supervise(self) -> None:
        while not self._stopping.wait(self._check_interval_s):
            try:
                self.check()
            except Exception:  # a failed spawn must not end supervision; the next pass retries
                logger.exception("runner supervision pass failed")

    def check(self) -> None:
        """One supervision pass: note deaths, schedule and perform restarts, give up crash loops."""
        now = time.monotonic()
        with self._lock:
            for slot in self._slots:
                if slot.given_up or self._stopping.is_set():
                    continue
                if slot.restart_at is None:
                    if slot.process.exitcode is not None:
                        self._on_death(slot, now)
                elif now >= slot.restart_at:
                    slot.worker_id, self._next_worker_id = self._next_worker_id, self._next_worker_id + 1
                    slot.process = self._process(slot.worker_id)
                    slot.process.start()
                    slot.started_at, slot.restart_at = now, None
                    self._restarts += 1

    def _on_death(self, slot: _Slot, now: float) -> None:
        code = slot.process.exitcode
        self._dead.add(store_worker_id(slot.worker_id))
        if slot.kill_requested:
            slot.kill_requested, slot.restart_at = False, now
            return
        self._last_exitcode = code
        if code == HUNG_EXIT_CODE:
            logger.warning("runner %s exited: hung sync agents held all its slots; restarting it", slot.worker_id)
            slot.restart_at = now
            return
        quick = now - slot.started_at < self._crash_window_s
        slot.quick_crashes = slot.quick_crashes + 1 if quick else 1
        if slot.quick_crashes >= self._max_crashes:
            slot.given_up = True
            logger.error(
                "runner %s exited (code %s) %d times in a row; giving it up", slot.worker_id, code, slot.quick_crashes
            )
            return
        delay = min(self._backoff_s * 2 ** (slot.quick_crashes - 1), self._max_backoff_s)
        slot.restart_at = now + delay
        logger.warning("runner %s exited (code %s); restarting it in %.0fs", slot.worker_id, code, delay)

    def restart(self, worker_id: str) -> None:
        """Kill the process serving store worker ``worker_id`` (a hung agent); ``check`` respawns it.

        A concurrent runner is left alone: it cancels the agent of a rollout that ended in the store
        itself, and exits on its own (``HUNG_EXIT_CODE``) when sync agents that ignore it hold every slot.
        """
        if self._concurrency is not None:
            return
        with self._lock:
            for slot in self._slots:
                if store_worker_id(slot.worker_id) == worker_id and slot.restart_at is None and not slot.given_up:
                    slot.kill_requested = True
                    if slot.process.is_alive():
                        cast(multiprocessing.Process, slot.process).kill()

    @property
    def alive(self) -> int:
        return sum(1 for p in self._processes if p.is_alive())

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def given_up(self) -> bool:
        """Every slot crashed too often: no runner is alive and none will restart."""
        return all(slot.given_up for slot in self._slots)

    def dead_workers(self) -> Collection[str]:
        with self._lock:
            return frozenset(self._dead)

    def describe(self) -> str:
        given_up = sum(1 for slot in self._slots if slot.given_up)
        return (
            f"{self.alive} of {len(self._slots)} runner processes alive, {self._restarts} restarts, "
            f"{given_up} given up after {self._max_crashes} quick exits in a row; "
            f"last exit code {self._last_exitcode}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask runners to finish their current rollouts and exit; kill those still running after ``timeout_s``.

        One deadline for all: the processes finish in parallel, so n of them take ``timeout_s``, not n times it.
        """
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                cast(multiprocessing.Process, process).kill()
                process.join(1.0)

    def __enter__(self) -> RunnerProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
