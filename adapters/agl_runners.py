"""Agent-lightning runners that execute the user's agent: in this process, or as worker processes.

A ``LitAgentRunner`` runs one rollout at a time per process (its tracer is process-global), so
parallel rollouts come from several runner processes attached to a store over HTTP, the way a
distributed deployment runs them. The runners poll the store every ``poll_interval`` seconds when
idle; the default here is 50 ms instead of Agent-lightning's 5 s.
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
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import Any, cast

from agentlightning import AgentOpsTracer, LightningStore, LitAgent, LitAgentRunner
from agentlightning.execution import MultiprocessingEvent, ThreadingEvent

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
    stop: ThreadingEvent | MultiprocessingEvent,
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


def _exit_with_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Exit when the parent is gone (even after its kill -9): an orphan runner must not outlive its run."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _runner_process(
    agent_reference: str,
    store_url: str,
    worker_id: int,
    poll_interval_s: float,
    stop: MultiprocessingEvent,
    token: str | None,
    parent_pid: int,
) -> None:
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
            await run_runner(agent, store, stop, worker_id=worker_id, poll_interval_s=poll_interval_s)
        finally:
            await store.close()

    asyncio.run(serve())


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
    ) -> None:
        """``token``: the store's shared secret (``adapters.store_auth``), handed to the children in memory."""
        if n < 1:
            raise ValueError(f"need at least one runner, got {n}")
        load_agent(agent_reference)  # fail here, with a clear message, rather than in n children
        self._context = multiprocessing.get_context("spawn")
        self._stop = MultiprocessingEvent(ctx=self._context)
        self._processes: Sequence[BaseProcess] = [
            self._context.Process(
                target=_runner_process,
                args=(agent_reference, store_url, worker_id, poll_interval_s, self._stop, token, os.getpid()),
                name=f"agl-runner-{worker_id}",
                daemon=True,
            )
            for worker_id in range(n)
        ]

    def start(self) -> RunnerProcesses:
        for process in self._processes:
            process.start()
        return self

    @property
    def alive(self) -> int:
        return sum(1 for p in self._processes if p.is_alive())

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask runners to finish their current rollout and exit; kill those that do not."""
        self._stop.set()
        for process in self._processes:
            process.join(timeout_s)
            if process.is_alive():
                cast(multiprocessing.Process, process).kill()
                process.join(1.0)

    def __enter__(self) -> RunnerProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
