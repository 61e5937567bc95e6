"""The lean OpenAI-compatible server of the policy endpoint: a Starlette app on the owner loop.

It serves ``PolicyProvider.complete`` directly, as an asyncio task of uvicorn on the event loop
that owns the samplers, so a request never crosses a thread or a second loop. Routes:

- ``POST /v1/chat/completions`` and ``/chat/completions``, also under
  ``/rollout/{rollout_id}/attempt/{attempt_id}`` (the ``ProxyLLM.get_base_url`` form): a request
  there gets the attempt's next span sequence id from the store and is recorded as that rollout's
  completion, as Agent-lightning's ``LLMProxy`` middleware does;
- ``GET /v1/models``, ``/models`` and ``/health/liveliness``.

Replies are the provider's ``ModelResponse`` as JSON (``prompt_token_ids``,
``choices[i].token_ids``, ``logprobs``); ``stream: true`` gets the same completion as
``chat.completion.chunk`` server-sent events ending in ``data: [DONE]``. Errors use OpenAI's
error JSON: 400 bad request, 401 missing key (``MasterKeyAuth``), 503 no policy yet, 504
sampling timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import uvicorn
from agentlightning import LightningStore
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from adapters.endpoint_capture import RolloutCall
from adapters.endpoint_provider import BadCompletionRequest, NoPolicy, PolicyFailed, PolicyProvider, SamplingTimeout

logger = logging.getLogger(__name__)

ROLLOUT_PREFIX = "/rollout/{rollout_id}/attempt/{attempt_id}"

_required_key_env: list[str] = []
"""The environment variable holding the key the running LiteLLM endpoint requires (empty: none)."""


KEEP_ALIVE_S = 65
"""Seconds an idle client connection stays open on the server side."""


class ServerStartError(RuntimeError):
    """The server could not bind or start; the message names the address."""


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    """OpenAI's error JSON."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}, status_code=status
    )


class MasterKeyAuth:
    """Answers 401 to a request without the endpoint's key, before the app sees it.

    ``key_envs`` names the environment variable holding the key (empty: none required). Without
    it the middleware reads the module-wide ``_required_key_env``: LiteLLM serves one FastAPI app
    per process and installs middlewares by class. The key itself stays in the environment. A
    plain ASGI middleware, so that it costs next to nothing on the loopback path.
    """

    def __init__(self, app: ASGIApp, key_envs: Sequence[str] | None = None) -> None:
        self.app = app
        self._key_envs = _required_key_env if key_envs is None else list(key_envs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key_envs = self._key_envs
        if scope["type"] == "http" and key_envs and not scope["path"].startswith("/health/liveliness"):
            expected = os.environ.get(key_envs[0], "")
            headers = dict(scope["headers"])
            supplied = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ").strip()
            supplied = supplied or headers.get(b"x-api-key", b"").decode("latin-1")
            if not expected or not hmac.compare_digest(supplied.encode(), expected.encode()):
                response = error_response(401, "missing or wrong API key", "authentication_error")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _sse(payload: Mapping[str, object]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def stream_chunks(response: Mapping[str, Any], include_usage: bool) -> Iterator[str]:
    """A complete chat completion as ``chat.completion.chunk`` events, then ``[DONE]``.

    Per choice: one delta with the role, the content and the tool calls (with their ``index``),
    carrying ``logprobs`` and ``token_ids``; then one with the finish reason. The first chunk
    also carries ``prompt_token_ids``; ``include_usage`` adds OpenAI's final usage chunk.
    """
    head = {
        "id": response["id"],
        "object": "chat.completion.chunk",
        "created": response["created"],
        "model": response["model"],
        "system_fingerprint": response.get("system_fingerprint"),
    }
    for position, choice in enumerate(cast(Sequence[Mapping[str, Any]], response["choices"])):
        message = cast(Mapping[str, Any], choice.get("message") or {})
        delta: dict[str, object] = {"role": "assistant", "content": message.get("content") or ""}
        tool_calls = cast(Sequence[Mapping[str, Any]], message.get("tool_calls") or [])
        if tool_calls:
            delta["tool_calls"] = [
                {"index": i, "id": call.get("id"), "type": "function", "function": dict(call.get("function") or {})}
                for i, call in enumerate(tool_calls)
            ]
        first: dict[str, object] = {
            **head,
            "choices": [
                {
                    "index": choice["index"],
                    "delta": delta,
                    "logprobs": choice.get("logprobs"),
                    "finish_reason": None,
                    "token_ids": choice.get("token_ids"),
                }
            ],
        }
        if position == 0:
            first["prompt_token_ids"] = response.get("prompt_token_ids")
        yield _sse(first)
        yield _sse(
            {**head, "choices": [{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}]}
        )
    if include_usage:
        yield _sse({**head, "choices": [], "usage": response.get("usage")})
    yield "data: [DONE]\n\n"


def build_app(provider: PolicyProvider, store: LightningStore | None, model_name: str) -> Starlette:
    """The Starlette app over ``provider``; ``store`` allocates the span sequence ids of rollout calls."""

    async def chat_completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return error_response(400, "the request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error_response(400, "the request body must be a JSON object", "invalid_request_error")
        params = cast(dict[str, object], body)
        call: RolloutCall | None = None
        path_params = request.path_params
        if path_params and store is not None:
            rollout_id, attempt_id = str(path_params["rollout_id"]), str(path_params["attempt_id"])
            sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
            call = RolloutCall(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
        model = params.get("model")
        try:
            response = await provider.complete(
                model if isinstance(model, str) and model else model_name, params.get("messages"), params, call
            )
        except BadCompletionRequest as error:
            return error_response(400, str(error), "invalid_request_error")
        except NoPolicy as error:
            return error_response(503, str(error), "service_unavailable")
        except SamplingTimeout as error:
            return error_response(504, str(error), "timeout")
        except PolicyFailed as error:
            return error_response(502, str(error), "policy_backend_error")
        if params.get("stream") is True:
            options = params.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(
                _iterate(stream_chunks(cast(Callable[[], dict[str, Any]], response.model_dump)(), include_usage)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return Response(response.model_dump_json(exclude_none=True), media_type="application/json")

    async def models(_: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "agl-tinker"}]}
        )

    async def liveliness(_: Request) -> Response:
        return JSONResponse("I'm alive!")

    routes = [
        Route(f"{prefix}{version}/chat/completions", chat_completions, methods=["POST"])
        for prefix in ("", ROLLOUT_PREFIX)
        for version in ("/v1", "")
    ]
    routes += [Route(path, models, methods=["GET"]) for path in ("/v1/models", "/models")]
    routes.append(Route("/health/liveliness", liveliness, methods=["GET"]))
    return Starlette(routes=routes)


async def _iterate(chunks: Iterator[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers to its owner."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_socket(host: str, port: int | None) -> socket.socket:
    """A listening socket on ``host:port`` (a free port when ``port`` is None)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP, and
    # without it every reply waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port or 0))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        reason = "is already in use" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error.strerror})"
        raise ServerStartError(f"port {port} on {host} {reason}") from error
    sock.setblocking(False)
    return sock


class LeanServer:
    """Serves an ASGI app with uvicorn as an asyncio task of the running loop, on a pre-bound socket."""

    def __init__(self, app: ASGIApp, host: str, port: int | None, startup_timeout_s: float = 60.0) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._startup_timeout_s = startup_timeout_s
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._bound_port: int | None = None

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise ServerStartError("the server is not started")
        return self._bound_port

    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        sock = bind_socket(self._host, self._port)
        self._bound_port = cast(int, sock.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            log_config=None,  # leave the process's logging as it is
            log_level=logging.WARNING,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            # Longer than clients keep idle connections (httpx: 5 s), so a client never reuses a connection
            # the server is closing (with uvicorn's 5 s both race, and agents saw httpx ReadErrors).
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = _EmbeddedServer(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name=f"policy-endpoint:{self._bound_port}")
        deadline = time.monotonic() + self._startup_timeout_s
        while not server.started:
            if task.done() or time.monotonic() > deadline:
                server.should_exit = True
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5)
                sock.close()
                raise ServerStartError(f"the server on {self._host}:{self._bound_port} did not start")
            await asyncio.sleep(0.005)
        self._server, self._task = server, task

    async def stop(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except TimeoutError:
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
