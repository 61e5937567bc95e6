"""One thread that runs all torch work of a backend, off the asyncio event loop.

A single thread keeps training and sampling steps from oversubscribing the cores (each op already
uses ``torch.get_num_threads()`` threads) and keeps the event loop -- which also serves HTTP --
free while a forward pass runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")


class TorchWorker:
    """Runs callables one at a time on a dedicated thread and awaits their results."""

    def __init__(self, num_threads: int | None = None) -> None:
        """``num_threads`` defaults to all cores but one.

        The spare core is for the event loop: torch's idle OpenMP threads spin between steps, and
        on a 2-core machine a busy loop thread competing with them made sampling up to 10x slower.
        """
        threads = num_threads or max(1, (os.cpu_count() or 1) - 1)
        torch.set_num_threads(threads)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-torch")

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread; the caller's event loop stays responsive meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def close(self) -> None:
        """Stop the thread once queued work is done."""
        self._executor.shutdown(wait=True)
