"""The store server's two per-request wrappers as one plain ASGI middleware, same answers for less CPU.

Agent-lightning 0.3.0's ``LightningStoreServer`` installs two ``@app.middleware("http")`` functions:
one turns an unhandled error under ``/v1/agl`` into a 500 JSON answer (``detail``, ``error_type``,
``traceback``) that its client reads as "retry", the other logs each request's time at debug level.
Starlette runs each such function as a ``BaseHTTPMiddleware``: an extra task and a streamed body per
request, for every dequeue poll and finished rollout of every runner. ``lean_store_server`` swaps
both for ``StoreErrorsAsJson`` (before the server starts), which answers the same 500 and logs the
same line only when debug logging is on; a server whose middlewares are not the expected two is left
as it is.
"""

from __future__ import annotations

import logging
import time
import traceback

from agentlightning import LightningStoreServer
from agentlightning.store.client_server import API_V1_AGL_PREFIX, API_V1_PREFIX
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)
server_logger = logging.getLogger("agentlightning.store.client_server")

_REPLACED = ("_app_exception_handler", "_log_time")


class StoreErrorsAsJson:
    """An unhandled error under ``/v1/agl`` becomes Agent-lightning's 500 JSON answer; request times at debug level."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        started = time.perf_counter()
        status = 0

        async def tracked(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as error:
            if not path.startswith(API_V1_AGL_PREFIX) or status:
                raise
            server_logger.exception("Unhandled application error", exc_info=error)
            payload = {"detail": "Internal server error", "error_type": type(error).__name__}
            payload["traceback"] = traceback.format_exc()
            await JSONResponse(status_code=500, content=payload)(scope, receive, send)
            status = 500
        if server_logger.isEnabledFor(logging.DEBUG) and (
            path.startswith(API_V1_AGL_PREFIX) or path.startswith(API_V1_PREFIX + "/traces")
        ):
            client = scope.get("client")
            address = f"{client[0]}:{client[1]}" if client else "unknown"
            elapsed_ms = (time.perf_counter() - started) * 1000
            server_logger.debug(
                '%s - "%s %s HTTP/%s" %d in %.2f ms',
                address,
                scope["method"],
                path,
                scope["http_version"],
                status,
                elapsed_ms,
            )


def lean_store_server(server: LightningStoreServer) -> LightningStoreServer:
    """Replace the server's two ``BaseHTTPMiddleware`` functions with ``StoreErrorsAsJson`` (before it starts)."""
    if server.app is None:
        raise RuntimeError("the store server has no app to change")
    stack = server.app.user_middleware
    found = [
        i
        for i, middleware in enumerate(stack)
        if middleware.cls is BaseHTTPMiddleware
        and getattr(middleware.kwargs.get("dispatch"), "__name__", None) in _REPLACED
    ]
    if len(found) != len(_REPLACED):
        logger.debug("store server middlewares are not the expected ones; leaving them")
        return server
    for i in reversed(found):
        del stack[i]
    server.app.add_middleware(StoreErrorsAsJson)
    return server
