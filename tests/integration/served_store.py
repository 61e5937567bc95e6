"""An Agent-lightning store served over HTTP on 127.0.0.1, as runner processes on other machines reach it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import agentlightning as agl


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def served_store(store: agl.LightningStore | None = None) -> AsyncIterator[agl.LightningStoreServer]:
    """``store`` (a fresh in-memory one by default) behind a ``LightningStoreServer`` on a free loopback port."""
    server = agl.LightningStoreServer(store or agl.InMemoryLightningStore(), host="127.0.0.1", port=free_port())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
