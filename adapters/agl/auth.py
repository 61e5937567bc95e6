"""A shared secret between the store server and everyone who talks to it.

Agent-lightning's ``LightningStoreServer`` answers anyone who reaches it: reading every trace,
enqueueing or cancelling rollouts, registering a fake LLM resource (to which runners would then
send the endpoint's key). Here the server's FastAPI app gets a middleware that answers 401 to any
request without ``Authorization: Bearer <token>`` (the health probe aside), and clients carry the
token: ``TokenStoreClient`` for the store API, and the OTLP span exporter of runner processes
through OpenTelemetry's standard header variable. The token lives in the environment
(``AGL_TINKER_STORE_TOKEN``) or is generated per run; it is never written to disk or logged.
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import Any
from urllib.parse import quote

import aiohttp
from agentlightning import LightningStoreClient, LightningStoreServer
from agentlightning.store.client_server import API_V1_AGL_PREFIX
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

STORE_TOKEN_ENV = "AGL_TINKER_STORE_TOKEN"
OTLP_HEADERS_ENV = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
_OPEN_PATHS = (API_V1_AGL_PREFIX + "/health",)


def store_token(generate: bool) -> str | None:
    """The token from the environment, else a fresh one when ``generate``, else ``None``."""
    token = os.environ.get(STORE_TOKEN_ENV, "").strip()
    if token:
        return token
    return secrets.token_urlsafe(32) if generate else None


class StoreTokenAuth:
    """401 for every store request without the bearer token (the health probe excepted).

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` costs a task and a body stream per
    request, and runners poll the store every few tens of milliseconds.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _OPEN_PATHS:
            supplied = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(supplied.strip(), self._expected):
                response = JSONResponse({"detail": "missing or wrong store token"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def protect(server: LightningStoreServer, token: str) -> LightningStoreServer:
    """Require ``token`` on every request to ``server`` (call before it starts)."""
    if server.app is None:
        raise RuntimeError("the store server has no app to protect")
    server.app.add_middleware(StoreTokenAuth, token=token)
    return server


class TokenStoreClient(LightningStoreClient):
    """``LightningStoreClient`` that sends the store token with every request.

    Agent-lightning's client has no header option; its sessions are made per event loop in
    ``_get_session``, so the token is added to each session's default headers there.
    """

    def __init__(self, server_address: str, token: str | None, **kwargs: Any) -> None:
        super().__init__(server_address, **kwargs)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    async def _get_session(self) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = await super()._get_session()
        session.headers.update(self._auth)
        return session


def export_spans_with_token(token: str | None) -> None:
    """Make this process's OTLP span exporters (the runner's tracer) send the token too."""
    if token:
        os.environ[OTLP_HEADERS_ENV] = "Authorization=" + quote(f"Bearer {token}")
