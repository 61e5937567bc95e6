"""Whether a Tinker server still takes connections while calls to it are in flight.

The tinker SDK retries a call to a server that has gone away for as long as the call's own bound
allows (minutes for a training step), so a dead server used to surface only when that bound expired.
``ServerLiveness`` probes the server's ``/api/v1/healthz`` while at least one guarded call runs (one
probe loop per event loop, however many calls) and fails every guarded call on that loop once no
connection could be opened for ``give_up_after_s``; after that, each new call first probes once and
fails at once while the server is still away, so a run does not wait the whole time again per call.
Only a refused or timed-out *connection* counts: any HTTP answer, an error status or a slow reply
included, shows the server is there, so a busy server is never given up on here; that stays the call
bounds' job. Probes go through httpx with the
environment's proxy settings, as the SDK's own requests do, carry no credentials, and do not check the
server's certificate (only whether it answers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

T = TypeVar("T")

HEALTH_PATH = "/api/v1/healthz"
DEFAULT_GIVE_UP_AFTER_S = 120.0
"""The SDK warns after two minutes of failed session heartbeats; a run gives up at the same point."""


class ServerUnreachable(Exception):
    """No connection to the server could be opened for the configured time."""


_UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError)


@dataclass(slots=True)
class _Watch:
    """One event loop's probe loop and the guarded calls that share it."""

    task: asyncio.Task[str]
    calls: int = 0


@dataclass(slots=True)
class ServerLiveness:
    """Fails guarded calls once the server at ``url`` has taken no connection for ``give_up_after_s``."""

    url: str
    give_up_after_s: float = DEFAULT_GIVE_UP_AFTER_S
    """0 turns the watch off: calls then end only by their own bounds."""
    probe_every_s: float = 5.0
    probe_timeout_s: float = 5.0
    _watches: dict[int, _Watch] = field(default_factory=dict, init=False, repr=False)
    _gone: str | None = field(default=None, init=False, repr=False)
    """Why the last watch gave up, until a probe reaches the server again."""

    @property
    def health_url(self) -> str:
        return self.url.rstrip("/") + HEALTH_PATH

    async def guard(self, call: Awaitable[T]) -> T:
        """``call``'s result; ``ServerUnreachable`` (and ``call`` cancelled) if the server goes away first."""
        if self.give_up_after_s <= 0:
            return await call
        if self._gone is not None:
            async with self._client() as client:
                failure = await self._probe(client)
            if failure is not None:
                asyncio.ensure_future(call).cancel()
                raise ServerUnreachable(f"{self._gone}; still none ({failure})")
            self._gone = None
        loop = asyncio.get_running_loop()
        watch = self._watches.get(id(loop))
        if watch is None or watch.task.done():
            watch = _Watch(loop.create_task(self._until_unreachable()))
            self._watches[id(loop)] = watch
        watch.calls += 1
        work = asyncio.ensure_future(call)
        try:
            await asyncio.wait({work, watch.task}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                self._gone = watch.task.result()
                raise ServerUnreachable(self._gone)
            return work.result()
        finally:
            work.cancel()
            watch.calls -= 1
            if watch.calls == 0:
                watch.task.cancel()
                if self._watches.get(id(loop)) is watch:
                    del self._watches[id(loop)]

    async def _until_unreachable(self) -> str:
        """Probe until no connection has opened for ``give_up_after_s``; the reason, in words."""
        loop = asyncio.get_running_loop()
        last_contact = loop.time()
        await asyncio.sleep(self.probe_every_s)  # calls shorter than one interval never build a client
        async with self._client() as client:
            while True:
                failure = await self._probe(client)
                if failure is None:
                    last_contact = loop.time()
                elif (silent := loop.time() - last_contact) >= self.give_up_after_s:
                    return f"no connection to {self.url} for {silent:.0f} s ({failure})"
                await asyncio.sleep(self.probe_every_s)

    def _client(self) -> httpx.AsyncClient:
        # No certificate check: a probe sends no credentials and reads nothing but whether the server answered,
        # and the SDK's own transport may trust other CAs than httpx would (a failed check is not a gone server).
        return httpx.AsyncClient(timeout=self.probe_timeout_s, verify=False)

    async def _probe(self, client: httpx.AsyncClient) -> str | None:
        """None when the server took the connection, whatever it answered; else the failure's name."""
        try:
            await client.get(self.health_url)
        except _UNREACHABLE as error:
            return type(error).__name__
        except httpx.HTTPError:
            pass  # a slow or broken answer is still a server that is there
        return None
