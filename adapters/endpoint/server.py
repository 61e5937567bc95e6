"""The lean OpenAI-compatible server of the policy endpoint: a Starlette app on the owner loop.

It serves ``PolicyProvider.complete`` directly, as an asyncio task of uvicorn on the event loop
that owns the samplers, so a request never crosses a thread or a second loop. Routes:

- ``POST /v1/chat/completions`` and ``/chat/completions``, also under
  ``/rollout/{rollout_id}/attempt/{attempt_id}`` (the ``ProxyLLM.get_base_url`` form): a request
  there is recorded as that rollout's completion, numbered with the attempt's next span sequence id
  once sampled (``PolicyProvider._numbered``);
- ``POST /v1/responses`` and ``/responses`` (OpenAI's Responses API), under the same prefixes:
  translated to the chat path (``adapters.endpoint.responses``), so recorded and continued alike;
- ``GET /v1/models`` and ``/models`` under the same prefixes, and ``/health/liveliness``;
- Agent-lightning 1.x's shapes, as its controller builds them from ``agl_server.agent_url``: the same
  three routes under ``/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{train|val}/openai/v1``
  (``val`` samples with the evaluation defaults) and ``POST /api/rollouts/{rollout_id}/attempt/{attempt_id}/events``
  (a reward event becomes a reward numbered on arrival, ``adapters.endpoint.events``). With a ``gate``
  (``adapters.endpoint.span_log``) a rollout the run has ended is answered 410 and one it does not hold 404.

Every request field is honoured or refused with a 400 naming it (``adapters.endpoint.fields``);
any other route answers 404 naming the route and what is served. ``RequestFailures`` counts the
errors answered, so a run that trains nothing can say what its agents were refused.

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
import re
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from adapters.endpoint.capture import RolloutCall
from adapters.endpoint.events import BadEvent, event_reply, event_span, parse_event
from adapters.endpoint.fields import CHAT_FIELDS, RESPONSES_FIELDS, check_fields
from adapters.endpoint.provider import (
    BadCompletionRequest,
    BadParam,
    CompletionError,
    NoPolicy,
    PolicyProvider,
    SamplingTimeout,
)
from adapters.endpoint.responses import ResponseLog, chat_request, reply_message, response_events, response_object
from adapters.endpoint.span_log import RolloutGate, RolloutState, SpanRecorder

logger = logging.getLogger(__name__)

ROLLOUT_PREFIX = "/rollout/{rollout_id}/attempt/{attempt_id}"
AGL1_PREFIX = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1"
AGL1_EVENTS = "/api/rollouts/{rollout_id}/attempt/{attempt_id}/events"
ROLLOUT_PATH = re.compile(r"^(/proxy)?/rollouts?/[^/]+/attempt/[^/]+(/mode/[^/]+/openai)?")
AGL1_MODES = ("train", "val")

_required_key_env: list[str] = []
"""The environment variable holding the key the running LiteLLM endpoint requires (empty: none)."""


KEEP_ALIVE_S = 65
"""Seconds an idle client connection stays open on the server side."""


class ServerStartError(RuntimeError):
    """The server could not bind or start; the message names the address."""


def error_response(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error JSON."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": str(status)}}, status_code=status
    )


SERVED = (
    "POST /chat/completions, POST /responses and GET /models, under /v1, the root and each rollout's base URL "
    "(/rollout/<rollout_id>/attempt/<attempt_id>[/v1], or Agent-lightning 1.x's "
    "/proxy/rollout/<rollout_id>/attempt/<attempt_id>/mode/<train|val>/openai/v1), "
    "POST /api/rollouts/<rollout_id>/attempt/<attempt_id>/events, and GET /health/liveliness"
)
"""What the endpoint serves, as its 404 says."""


class RequestFailures:
    """The errors the endpoint answered, by kind (e.g. ``404 on POST .../v1/responses``).

    ``most_common`` looks at the latest ``window`` failures, so what a run ends with names what its
    agents were refused lately; ``take_counts`` counts failures by status since its last call.
    """

    def __init__(self, window: int = 1024) -> None:
        self._recent: deque[str] = deque(maxlen=window)
        self._examples: dict[str, str] = {}
        self._statuses: Counter[int] = Counter()
        self._lock = threading.Lock()

    def note(self, method: str, path: str, status: int, message: str) -> None:
        key = f"{status} on {method} {ROLLOUT_PATH.sub('...', path)}"
        with self._lock:
            self._recent.append(key)
            self._examples[key] = message
            self._statuses[status] += 1

    def most_common(self) -> str | None:
        """The most frequent recent failure with its count and latest message; None when there was none."""
        with self._lock:
            if not self._recent:
                return None
            (key, count), total = Counter(self._recent).most_common(1)[0], len(self._recent)
            example = self._examples[key]
        times = "once" if count == 1 else f"{count} times"
        return f"the endpoint answered {key} {times} of {total} failed requests: {example}"

    def take_counts(self) -> dict[str, int]:
        """Failures answered since the last call, by HTTP status (``failed/404``: 3)."""
        with self._lock:
            counts, self._statuses = self._statuses, Counter()
        return {f"failed/{status}": n for status, n in sorted(counts.items())}


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


class RefuseResponses:
    """On the LiteLLM server variant: answers ``/responses`` with a 400 that points to the lean server.

    LiteLLM's own Responses bridge would not go through the provider's token-for-token path nor its
    records, so the request is refused by name rather than served untracked.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope["path"]).rstrip("/").endswith("/responses"):
            message = "the Responses API is served by the lean endpoint server only (endpoint_server=lean)"
            await error_response(400, message, "invalid_request_error")(scope, receive, send)
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


def _failure(error: CompletionError) -> JSONResponse:
    if isinstance(error, BadCompletionRequest):
        return error_response(400, str(error), "invalid_request_error", error.param)
    if isinstance(error, NoPolicy):
        return error_response(503, str(error), "service_unavailable")
    if isinstance(error, SamplingTimeout):
        return error_response(504, str(error), "timeout")
    return error_response(502, str(error), "policy_backend_error")


def build_app(
    provider: PolicyProvider,
    store: SpanRecorder | None,
    model_name: str,
    failures: RequestFailures | None = None,
    gate: RolloutGate | None = None,
) -> Starlette:
    """The Starlette app over ``provider``; without a ``store`` no call is a rollout's (nothing is recorded).

    ``failures`` counts every error answered (by status, method and route); ``gate`` says which rollouts the
    1.x routes serve (``None``: any).
    """
    failures = failures if failures is not None else RequestFailures()
    responses_log = ResponseLog()

    def failed(request: Request, response: JSONResponse) -> JSONResponse:
        error = cast(dict[str, dict[str, str]], json.loads(bytes(response.body)))["error"]
        failures.note(request.method, request.url.path, response.status_code, error["message"])
        return response

    async def read_body(request: Request) -> dict[str, object]:
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            raise BadParam(None, "the request body is not valid JSON") from error
        if not isinstance(body, dict):
            raise BadParam(None, "the request body must be a JSON object")
        return cast(dict[str, object], body)

    async def rollout_of(request: Request) -> RolloutCall | None:
        path_params = request.path_params
        if not path_params or store is None:
            return None
        # Numbered by the provider once sampled (``PolicyProvider._numbered``), not on arrival.
        return RolloutCall(rollout_id=str(path_params["rollout_id"]), attempt_id=str(path_params["attempt_id"]))

    def refusal(request: Request) -> JSONResponse | None:
        """404 for a mode other than train or val; with a gate, 404 for a rollout the run does not hold and 410 for
        one it ended."""
        path_params = request.path_params
        mode = path_params.get("mode")
        if mode is not None and mode not in AGL1_MODES:
            message = f"mode {mode!r} is not served; use train or val"
            return failed(request, error_response(404, message, "not_found"))
        if gate is None or "rollout_id" not in path_params:
            return None
        rollout_id = str(path_params["rollout_id"])
        state = gate.state(rollout_id)
        if state is RolloutState.ENDED:
            message = f"rollout {rollout_id} has ended: this run serves it no more"
            return failed(request, error_response(410, message, "rollout_ended"))
        if state is RolloutState.UNKNOWN:
            message = f"rollout {rollout_id} is not one of this run's rollouts"
            return failed(request, error_response(404, message, "not_found"))
        return None

    def evaluation(request: Request) -> bool:
        return request.path_params.get("mode") == "val"

    def model_of(params: Mapping[str, object]) -> str:
        model = params.get("model")
        return model if isinstance(model, str) and model else model_name

    async def chat_completions(request: Request) -> Response:
        if (refused := refusal(request)) is not None:
            return refused
        try:
            params = await read_body(request)
            check_fields(params, CHAT_FIELDS)
            call = await rollout_of(request)
            response = await provider.complete(
                model_of(params), params.get("messages"), params, call, evaluation=evaluation(request)
            )
        except BadParam as error:
            return failed(request, error_response(400, str(error), "invalid_request_error", error.param))
        except CompletionError as error:
            return failed(request, _failure(error))
        if params.get("stream") is True:
            options = params.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(
                _iterate(stream_chunks(cast(Callable[[], dict[str, Any]], response.model_dump)(), include_usage)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return Response(response.model_dump_json(exclude_none=True), media_type="application/json")

    async def responses(request: Request) -> Response:
        if (refused := refusal(request)) is not None:
            return refused
        path_params = request.path_params
        scope = (str(path_params["rollout_id"]), str(path_params["attempt_id"])) if path_params else None
        try:
            body = await read_body(request)
            check_fields(body, RESPONSES_FIELDS)
            previous_id = body.get("previous_response_id")
            previous = responses_log.conversation(previous_id, scope) if previous_id is not None else None
            chat = chat_request(body, previous)
            call = await rollout_of(request)
            served = await provider.complete(
                model_of(body), chat.messages, chat.params, call, evaluation=evaluation(request)
            )
        except BadParam as error:
            return failed(request, error_response(400, str(error), "invalid_request_error", error.param))
        except CompletionError as error:
            return failed(request, _failure(error))
        completion = cast(Callable[[], dict[str, Any]], served.model_dump)()
        reply = response_object(completion, body, f"resp_{uuid.uuid4().hex}")
        if body.get("store") is not False:
            responses_log.add(reply["id"], scope, [*chat.history, reply_message(completion)])
        if body.get("stream") is True:
            return StreamingResponse(
                _iterate(response_events(reply)), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        return JSONResponse(reply)

    async def events(request: Request) -> Response:
        """A 1.x event, numbered on arrival from the rollout's counter and recorded as a span."""
        if (refused := refusal(request)) is not None:
            return refused
        rollout_id, attempt_id = str(request.path_params["rollout_id"]), str(request.path_params["attempt_id"])
        try:
            event = parse_event(await read_body(request))
        except (BadParam, BadEvent) as error:
            return failed(request, error_response(400, str(error), "invalid_request_error"))
        if store is None:
            message = "this endpoint records no rollout: the event cannot be kept"
            return failed(request, error_response(503, message, "service_unavailable"))
        try:
            sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
            await store.add_span(event_span(event, rollout_id, attempt_id, sequence_id))
        except Exception as error:  # the store's own errors vary by backend: the agent learns it was not kept
            logger.warning("could not record an event of rollout %s: %s", rollout_id, error)
            message = f"the event could not be recorded: {type(error).__name__}: {error}"
            return failed(request, error_response(503, message, "service_unavailable"))
        return JSONResponse(event_reply(event, rollout_id, attempt_id))

    async def models(request: Request) -> Response:
        if (refused := refusal(request)) is not None:
            return refused
        return JSONResponse(
            {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "agl-tinker"}]}
        )

    async def liveliness(_: Request) -> Response:
        return JSONResponse("I'm alive!")

    async def not_served(request: Request, error: Exception) -> Response:
        status = error.status_code if isinstance(error, HTTPException) else 404
        route = f"{request.method} {request.url.path}"
        if status == 405:
            message = f"{route}: method not allowed; the endpoint serves {SERVED}"
            return failed(request, error_response(405, message, "invalid_request_error"))
        return failed(request, error_response(404, f"{route} is not served; the endpoint serves {SERVED}", "not_found"))

    prefixes = [f"{prefix}{version}" for prefix in ("", ROLLOUT_PREFIX) for version in ("/v1", "")]
    prefixes.append(AGL1_PREFIX)
    routes = [Route(f"{p}/chat/completions", chat_completions, methods=["POST"]) for p in prefixes]
    routes += [Route(f"{p}/responses", responses, methods=["POST"]) for p in prefixes]
    routes += [Route(f"{p}/models", models, methods=["GET"]) for p in prefixes]
    routes.append(Route(AGL1_EVENTS, events, methods=["POST"]))
    routes.append(Route("/health/liveliness", liveliness, methods=["GET"]))
    return Starlette(routes=routes, exception_handlers={404: not_served, 405: not_served})


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
