"""Stores for the tests: served on a free loopback port in this process, or as an ``agl-tinker store`` process."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import agentlightning as agl
import aiohttp

from adapters.store_finish import serve_finish
from adapters.store_forget import serve_forget
from app.launch import free_port
from tests.support.cli import cli_process
from tests.support.waits import until

__all__ = ["free_port", "served_store", "store_process", "wait_healthy"]


@asynccontextmanager
async def served_store(
    store: agl.LightningStore | None = None, *, project_routes: bool = True
) -> AsyncIterator[agl.LightningStoreServer]:
    """``store`` (a fresh in-memory one by default) behind a ``LightningStoreServer`` on a free loopback port.

    ``project_routes``: with the routes this project's servers add (``adapters.store_finish``, ``store_forget``);
    False: as ``agl store`` serves it.
    """
    server = agl.LightningStoreServer(store or agl.InMemoryLightningStore(), host="127.0.0.1", port=free_port())
    if project_routes:
        serve_forget(serve_finish(server))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def store_process(port: int, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``agl-tinker store --port PORT ARGS`` as its own process."""
    return cli_process("store", "--port", str(port), *args, **popen)


async def wait_healthy(url: str, process: subprocess.Popen[str] | None = None) -> None:
    """Until the store at ``url`` answers its health probe; fails if ``process`` (serving it) exits first."""
    async with aiohttp.ClientSession() as http:

        async def healthy() -> bool:
            assert process is None or process.poll() is None, f"the store process exited ({process.returncode})"
            try:
                async with http.get(url + "/v1/agl/health", timeout=aiohttp.ClientTimeout(total=1)) as response:
                    return response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        await until(healthy, f"the store at {url} did not come up", interval_s=0.1)
