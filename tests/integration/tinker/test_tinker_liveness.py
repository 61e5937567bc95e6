"""The liveness watch over real loopback sockets: a server that stops taking connections ends the calls in flight."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.tinker.liveness import HEALTH_PATH, ServerLiveness, ServerUnreachable
from tests.support.waits import HANG_S, until


class HealthServer:
    """A loopback HTTP server that counts its health probes; ``status`` is what it answers, ``None``: never."""

    def __init__(self, status: int | None = 200, tls: ssl.SSLContext | None = None) -> None:
        self.status = status
        self._tls = tls
        self.probes = 0
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        try:
            while request := await reader.readuntil(b"\r\n\r\n"):
                if HEALTH_PATH.encode() in request.split(b"\r\n", 1)[0]:
                    self.probes += 1
                if self.status is None:
                    await reader.read()  # until the client gives up and closes
                    return
                writer.write(f"HTTP/1.1 {self.status} X\r\ncontent-length: 0\r\n\r\n".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._clients.discard(writer)
            writer.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._clients):  # kept-alive connections too: gone, not just closed to new ones
            writer.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"


@pytest.fixture
async def health() -> AsyncIterator[HealthServer]:
    server = HealthServer()
    await server.start()
    yield server
    if server._server is not None and server._server.is_serving():
        await server.stop()


def watch(url: str, probe_timeout_s: float = 1.0) -> ServerLiveness:
    return ServerLiveness(url, give_up_after_s=0.3, probe_every_s=0.05, probe_timeout_s=probe_timeout_s)


def self_signed_context(directory: Path) -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert, pem_key = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    pem_key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, pem_key)
    return context


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_call_outlasting_the_limit_finishes_while_the_server_answers(health: HealthServer) -> None:
    assert await outlives_the_limit(health, watch(health.url)) == 7


async def test_a_certificate_the_probe_cannot_verify_is_a_server_that_is_there(tmp_path: Path) -> None:
    """The SDK's transport may trust CAs that httpx does not: a self-signed server must not end the calls."""
    server = HealthServer(tls=self_signed_context(tmp_path))
    await server.start()
    try:
        assert await outlives_the_limit(server, watch(server.url)) == 7
    finally:
        await server.stop()


async def test_error_statuses_and_silent_replies_count_as_a_server_that_is_there(health: HealthServer) -> None:
    """Any answer shows the server is up; one that accepts connections but never replies is up and busy."""
    for status in (404, 503, None):
        health.status = status
        assert await outlives_the_limit(health, watch(health.url, probe_timeout_s=0.2)) == 7, status


async def outlives_the_limit(health: HealthServer, liveness: ServerLiveness) -> int:
    """A guarded call that returns 7 once the server has seen 12 probes (0.6 s or more: twice the limit)."""
    release, before = asyncio.Event(), health.probes

    async def call() -> int:
        await release.wait()
        return 7

    guarded = asyncio.ensure_future(liveness.guard(call()))
    await until(lambda: _ready(health.probes >= before + 12), "no probes reached the server")
    release.set()
    return await asyncio.wait_for(guarded, HANG_S)


async def test_the_calls_in_flight_fail_once_the_server_goes_away(health: HealthServer) -> None:
    liveness = watch(health.url)
    cancelled: list[int] = []

    async def stuck_call(i: int) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    calls = [asyncio.ensure_future(liveness.guard(stuck_call(i))) for i in range(3)]
    await until(lambda: _ready(health.probes >= 2), "no probes reached the server")
    await health.stop()

    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), HANG_S)
    assert all(isinstance(r, ServerUnreachable) for r in results), results
    message = str(results[0])
    assert message.startswith(f"no connection to {health.url} for ") and "ConnectError" in message, message
    assert sorted(cancelled) == [0, 1, 2], "an abandoned call kept running"


async def test_once_given_up_new_calls_fail_at_once_until_the_server_is_back(health: HealthServer) -> None:
    liveness = watch(health.url)
    await health.stop()
    with pytest.raises(ServerUnreachable):
        await asyncio.wait_for(liveness.guard(asyncio.Event().wait()), HANG_S)
    started: list[str] = []

    async def call() -> str:
        started.append("call")
        return "done"

    with pytest.raises(ServerUnreachable, match=r"; still none \(ConnectError\)$"):
        await liveness.guard(call())  # one probe, no watch: no wait of give_up_after_s
    await asyncio.sleep(0)
    assert started == [], "a call was sent to a server known to be away"

    await health.start()  # the same port
    assert await asyncio.wait_for(liveness.guard(call()), HANG_S) == "done"
    assert await asyncio.wait_for(liveness.guard(call()), HANG_S) == "done"
    assert started == ["call", "call"]


async def test_a_server_that_never_listened_fails_the_call_and_names_its_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ServerUnreachable, match=f"no connection to {url}"):
        await asyncio.wait_for(watch(url).guard(asyncio.Event().wait()), HANG_S)


async def test_the_watch_probes_only_while_calls_are_in_flight(health: HealthServer) -> None:
    liveness = watch(health.url)
    release = asyncio.Event()

    async def call() -> None:
        await release.wait()

    first = asyncio.ensure_future(liveness.guard(call()))
    second = asyncio.ensure_future(liveness.guard(call()))
    await until(lambda: _ready(health.probes >= 4), "no probes reached the server")
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), HANG_S)
    after = health.probes
    await asyncio.sleep(0.5)  # ten probe intervals with nothing in flight
    assert health.probes - after <= 1, "the watch kept probing after its last call ended"


async def test_zero_turns_the_watch_off() -> None:
    liveness = ServerLiveness(f"http://127.0.0.1:{closed_port()}", give_up_after_s=0, probe_every_s=0.01)

    async def call() -> str:
        await asyncio.sleep(0.2)
        return "done"

    assert await liveness.guard(call()) == "done"


async def test_a_failing_call_fails_with_its_own_error(health: HealthServer) -> None:
    async def failing() -> None:
        raise ValueError("from the call")

    with pytest.raises(ValueError, match="from the call"):
        await watch(health.url).guard(failing())


async def _ready(condition: bool) -> bool:
    return condition
