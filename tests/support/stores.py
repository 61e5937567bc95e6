"""Stores for the tests: served on a free loopback port in this process, or as an ``agl-tinker store`` process."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import agentlightning as agl
import aiohttp

from adapters.agl.server import project_store_server
from app.launch import free_port
from tests.support.cli import cli_process
from tests.support.waits import until

__all__ = ["free_port", "served_store", "store_process", "wait_healthy"]


@asynccontextmanager
async def served_store(
    store: agl.LightningStore | None = None, *, project_routes: bool = True
) -> AsyncIterator[agl.LightningStoreServer]:
    """``store`` (a fresh in-memory one by default) behind a ``LightningStoreServer`` on a free loopback port.

    ``project_routes``: as this project's servers run (``adapters.agl.server``); False: as ``agl store`` does.
    """
    store = store or agl.InMemoryLightningStore()
    server_args: dict[str, Any] = {"host": "127.0.0.1", "port": free_port()}
    server = (
        project_store_server(store, None, **server_args)
        if project_routes
        else agl.LightningStoreServer(store, **server_args)
    )
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
