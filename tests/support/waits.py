"""Waits bounded by events: each ends when its condition holds; its timeout only catches a hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

HANG_S = 120.0
"""How long a wait may last before the test calls it a hang: it catches hangs, it does not time anything."""


async def until(
    condition: Callable[[], Awaitable[bool]], hung: str, *, timeout_s: float = HANG_S, interval_s: float = 0.02
) -> None:
    """Until ``condition()`` holds; an ``AssertionError`` saying ``hung`` if it still does not after ``timeout_s``."""

    async def holds() -> None:
        while not await condition():
            await asyncio.sleep(interval_s)

    try:
        await asyncio.wait_for(holds(), timeout_s)
    except TimeoutError:
        raise AssertionError(hung) from None


def wait_until(condition: Callable[[], bool], hung: str, *, timeout_s: float = HANG_S, interval_s: float = 0.1) -> None:
    """``until`` for code without an event loop: polls ``condition()`` every ``interval_s``."""
    for _ in range(max(1, round(timeout_s / interval_s))):
        if condition():
            return
        time.sleep(interval_s)
    assert condition(), hung
