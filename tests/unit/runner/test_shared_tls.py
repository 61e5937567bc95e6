"""The TLS context a runner process's HTTP clients share: the one they would have built, never a weaker one.

Handshakes go to a TLS server on 127.0.0.1 with a self-signed certificate, which a verifying client must refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import httpx2
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from adapters.runner import tls
from adapters.runner.tls import SWITCH_ENV, share_default_tls_contexts

HANG_S = 30.0


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Sharing on for the test, the libraries' transports as they were after it."""
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    classes = [
        httpx.HTTPTransport,
        httpx.AsyncHTTPTransport,
        httpx2.HTTPTransport,
        httpx2.AsyncHTTPTransport,
    ]
    before = {cls: cls.__dict__["__init__"] for cls in classes}
    monkeypatch.setattr(tls, "_contexts", {})
    try:
        yield share_default_tls_contexts()
    finally:
        for cls, init in before.items():
            cls.__init__ = init  # type: ignore[method-assign]


def context_of(client: httpx.AsyncClient | httpx2.AsyncClient | openai.AsyncOpenAI) -> ssl.SSLContext:
    inner = client._client if isinstance(client, openai.AsyncOpenAI) else client
    context = inner._transport._pool._ssl_context  # type: ignore[union-attr]
    assert isinstance(context, ssl.SSLContext)
    return context


def test_clients_share_one_context_that_verifies_like_the_one_they_would_have_built(shared: list[str]) -> None:
    assert set(shared) == {
        "httpx.HTTPTransport",
        "httpx.AsyncHTTPTransport",
        "httpx2.HTTPTransport",
        "httpx2.AsyncHTTPTransport",
    }
    first, second = (openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k") for _ in range(2))
    assert context_of(first) is context_of(second)
    assert context_of(httpx.AsyncClient()) is context_of(httpx.AsyncClient())
    own = httpx2.create_ssl_context()  # what the client would have built
    context = context_of(first)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats() == own.cert_store_stats()
    assert context.cert_store_stats()["x509_ca"] > 0


def test_explicit_tls_settings_are_left_alone(shared: list[str]) -> None:
    mine = ssl.create_default_context()
    assert context_of(httpx.AsyncClient(verify=mine)) is mine
    unverified = context_of(httpx2.AsyncClient(verify=False))
    assert unverified.verify_mode == ssl.CERT_NONE
    default = context_of(httpx2.AsyncClient())
    assert default is not unverified and default.verify_mode == ssl.CERT_REQUIRED
    assert context_of(httpx2.AsyncClient(http2=True)) is not default, "ALPN is set per context: one per protocol set"


def test_a_changed_ca_bundle_variable_gets_its_own_context(
    shared: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = context_of(httpx.AsyncClient())
    certificate, _ = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    after = context_of(httpx.AsyncClient())
    assert after is not before
    assert after.cert_store_stats()["x509_ca"] == 1
    assert context_of(httpx.AsyncClient(trust_env=False)) is not after


def test_switched_off_each_client_builds_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH_ENV, "0")
    assert share_default_tls_contexts() == []
    assert context_of(httpx2.AsyncClient()) is not context_of(httpx2.AsyncClient())


async def test_a_shared_context_still_refuses_a_certificate_it_does_not_trust(
    shared: list[str], tmp_path: Path
) -> None:
    certificate, key = self_signed(tmp_path)
    async with https_server(certificate, key) as url:
        async with httpx2.AsyncClient(verify=False) as careless:  # its own context, before the shared one is made
            assert (await careless.get(url)).status_code == 200
        trusting = ssl.create_default_context(cafile=str(certificate))
        async with httpx2.AsyncClient(verify=trusting) as trusted:
            assert (await trusted.get(url)).status_code == 200
        for _ in range(2):
            async with httpx2.AsyncClient() as client, httpx.AsyncClient() as other:
                with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await asyncio.wait_for(client.get(url), HANG_S)
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await asyncio.wait_for(other.get(url), HANG_S)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@contextlib.asynccontextmanager
async def https_server(certificate: Path, key: Path) -> AsyncIterator[str]:
    """A TLS server on 127.0.0.1 that answers every request ``200 ok``: its ``https://127.0.0.1:<port>/`` URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # a client that refused the certificate hangs up during the handshake
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        server.close()
        await server.wait_closed()
