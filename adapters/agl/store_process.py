"""The run's in-memory store served from a process of its own, out of the trainer's interpreter lock.

Served in the trainer's process (a uvicorn thread), every runner request (dequeues, finished
rollouts, status checks) takes the trainer's GIL: its CPU and its waits add to the trainer's, and
the endpoint's loop waits for the lock after each tokenizer call. Here the same server (Agent-
lightning's ``LightningStoreServer`` over ``InMemoryLightningStore``, with the project's token
check and routes) runs in a child process; the trainer and the endpoint reach it over HTTP as any
runner does. The child starts through ``adapters.runner.entry`` (it dies with its parent) and serves
``adapters.agl.server.serve_store_process``; it binds 127.0.0.1 only, and gets the token through the
process pipe, never the environment or disk. A child that dies is started again on the same port:
the store comes back empty, which the rollout-store adapter's outage handling already reports (its
rollouts count as lost, resources are published again).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import urllib.error
import urllib.request
from multiprocessing.process import BaseProcess

from agentlightning.store.client_server import API_V1_AGL_PREFIX

from adapters.runner.entry import store_main

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0
"""Only catches a hang: the child imports Agent-lightning first, seconds on a loaded machine."""


class StoreProcess:
    """A store server in a child process on ``127.0.0.1:port``, restarted if it dies (``max_restarts`` at most)."""

    def __init__(self, port: int, token: str, *, max_restarts: int = 3, check_interval_s: float = 0.5) -> None:
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self._token = token
        self._context = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._max_restarts, self._check_interval_s = max_restarts, check_interval_s
        self.restarts = 0
        self._stopping = threading.Event()
        self._watch: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The current child's process id (a restart changes it)."""
        return None if self._process is None else self._process.pid

    def _spawn(self) -> BaseProcess:
        process = self._context.Process(
            target=store_main,
            args=(os.getpid(), "127.0.0.1", self.port, self._token),
            name="agl-store",
            daemon=True,
        )
        process.start()
        return process

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + API_V1_AGL_PREFIX + "/health", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> StoreProcess:
        """Start the child and wait until it answers; ``RuntimeError`` (one line) if it exits first."""
        return self.spawn().wait_ready()

    def spawn(self) -> StoreProcess:
        """Start the child from this thread (it must live as long as the store: see ``adapters.runner.entry``)."""
        self._process = self._spawn()
        return self

    def wait_ready(self) -> StoreProcess:
        """Until the child answers its health probe (any thread); then watch it."""
        assert self._process is not None, "spawn() first"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._healthy():
            if self._process.exitcode is not None:
                raise RuntimeError(f"the store process exited with code {self._process.exitcode} before serving")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the store process did not answer within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.05)
        # Restarts are spawned from this thread, which lives as long as the store: the kernel's parent-death
        # signal follows the thread that spawned a process.
        self._watch = threading.Thread(target=self._supervise, name="agl-store-watch", daemon=True)
        self._watch.start()
        return self

    def _supervise(self) -> None:
        while not self._stopping.wait(self._check_interval_s):
            process = self._process
            if process is None or process.exitcode is None:
                continue
            if self.restarts >= self._max_restarts:
                logger.error("the store process exited (code %s) again; not restarting it", process.exitcode)
                return
            self.restarts += 1
            logger.warning("the store process exited (code %s); starting it again, empty", process.exitcode)
            self._process = self._spawn()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        process = self._process
        if process is None or process.exitcode is not None:
            return
        process.terminate()
        process.join(timeout_s)
        if process.exitcode is None:
            process.kill()
            process.join()

    def __enter__(self) -> StoreProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
