"""An HTTP proxy that lets the tinker 0.38 SDK talk to SkyRL 0.4.0's Tinker API server.

It bridges exactly the wire-format gaps between the two (each can go once SkyRL closes it) and
refuses with a 400 what SkyRL would accept and silently ignore. Everything else passes through
unchanged, so a request the SDK and the server already agree on costs one extra loopback hop.

Bridged (SkyRL 0.4.0, tinker 0.38.0):

- ``POST /api/v1/asample`` answers ``{future_id, status, request_id}``; the SDK asserts that the
  promise carries one ``sample_sequence_ids`` entry per sample (it only stamps them on the
  returned sequences). The proxy adds one id per sample.
- The JAX backend returns ``prompt_logprobs`` one entry short (it drops the leading entry, which
  Tinker sends as NaN: no token precedes the first). Exactly when one entry is missing, the proxy
  puts the NaN back; any other length passes through for the SDK to reject.

Refused with a 400 that names the field (SkyRL 0.4.0 would ignore it without a word):

- ``optim_step`` with ``adam_params.grad_clip_norm`` other than 0, or any optimizer but Adam;
- ``create_model`` whose LoRA targets differ from SkyRL's fixed ones (attention and MLP, never the output
  layer: the SDK's default ``train_unembed=True`` is refused) or that asks for an optimizer other than Adam;
- ``asample`` with ``topk_sample_logprobs``, ``target_prompt_logprobs``, ``prompt_alt_tokens_k`` or
  ``prompt_logprobs_last_n``;
- sampling a checkpoint of a training run whose weights changed since it was saved: SkyRL samples a
  LoRA checkpoint by loading it into the training run's own adapter slot, so such a sample would
  reset the live training weights to the checkpoint's (a KL reference scored after the first step,
  or an older sampler in asynchronous training). Checkpoints saved since the run's last optimizer
  step or weight load are the live weights, and sample normally.

Not bridged: ``ServiceClient.create_training_client_from_state*`` sends a ``load_weights`` without a
``model_id`` and expects the server to create the run; SkyRL has no such call (422, ``model_id``
required). That is a missing capability, not a request shape, so it passes through and the client
falls back to loading the state as a fresh training client's first call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import struct
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

logger = logging.getLogger(__name__)

PROTO_CONTENT_TYPE = "application/x-protobuf"
SLOT_BEHAVIOUR = (
    "SkyRL 0.4.0 samples a LoRA checkpoint by loading it into the training run's own adapter slot, so sampling "
    "checkpoint {checkpoint!r} of {model!r}, saved before the run's weights last changed, would reset the live "
    "training weights to it (a KL reference needs kl_penalty_coef=0 on this server; asynchronous training needs "
    "the synchronous loop)"
)
_HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "keep-alive", "accept-encoding"}
SKYRL_LORA_TARGETS = {"train_attn": True, "train_mlp": True, "train_unembed": False}
"""What SkyRL 0.4.0's API trains whatever the request says (its ``LoRAConfig`` takes only ``rank`` and ``seed``)."""
_IGNORED_SAMPLE_FIELDS = {
    "topk_sample_logprobs": 0,
    "target_prompt_logprobs": None,
    "prompt_alt_tokens_k": 0,
    "prompt_logprobs_last_n": None,
}


def refusal(message: str) -> JSONResponse:
    """A 400 in the shape SkyRL (FastAPI) gives its own errors, so the SDK shows ``message``."""
    return JSONResponse({"detail": message}, status_code=400)


def _sampler_checkpoint(model_path: str) -> tuple[str, str] | None:
    """``(model_id, checkpoint_id)`` of ``tinker://M/C`` or ``tinker://M/sampler_weights/C``."""
    if not model_path.startswith("tinker://"):
        return None
    parts = model_path.removeprefix("tinker://").split("/")
    if len(parts) == 2 or (len(parts) == 3 and parts[1] == "sampler_weights"):
        return parts[0], parts[-1]
    return None


def _prompt_length(prompt: Mapping[str, Any]) -> int | None:
    """Tokens in a JSON ``ModelInput`` made only of encoded text chunks (None: other chunks)."""
    total = 0
    for chunk in prompt.get("chunks", []):
        if chunk.get("type", "encoded_text") != "encoded_text":
            return None
        total += len(chunk.get("tokens", []))
    return total


def restore_leading_prompt_logprob(body: bytes, prompt_length: int) -> bytes:
    """A proto ``SampleResponse`` whose ``prompt_logprobs`` is exactly one short gets its leading NaN back."""
    from tinker.proto import tinker_public_pb2 as pb

    message = pb.SampleResponse()
    message.ParseFromString(body)
    if not message.prompt_logprobs:
        return body
    n = len(message.prompt_logprobs) // 4
    if n != prompt_length - 1:
        return body
    message.prompt_logprobs = struct.pack("<f", math.nan) + bytes(message.prompt_logprobs)
    return message.SerializeToString()


@dataclass
class ProxyState:
    """What the proxy remembers between requests: futures to fix, and which checkpoints are live."""

    prompt_lengths: dict[str, int] = field(default_factory=dict)
    """Future id of a sample that asked for prompt logprobs -> prompt length."""
    sampler_saves: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Future id of a ``save_weights_for_sampler`` with sampling-session ids -> (model, checkpoint)."""
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Sampling session id -> (model, checkpoint) it samples."""
    live: dict[str, set[str]] = field(default_factory=dict)
    """Model id -> sampler checkpoints saved since its weights last changed."""

    def weights_changed(self, model_id: str) -> None:
        self.live[model_id] = set()

    def check_sample(self, target: tuple[str, str] | None) -> str | None:
        """Why sampling ``target`` must be refused, or None."""
        if target is None:
            return None
        model_id, checkpoint = target
        live = self.live.get(model_id)
        if live is None or checkpoint in live:  # a run this proxy has not seen train: nothing to protect
            return None
        return SLOT_BEHAVIOUR.format(checkpoint=checkpoint, model=model_id)


class CompatProxy:
    """The Starlette app: every route passes through, a few are inspected or amended on the way."""

    def __init__(self, upstream: str, *, timeout_s: float = 600.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.state = ProxyState()
        self._client: httpx.AsyncClient | None = None
        self._timeout_s = timeout_s
        self.app = Starlette(
            routes=[Route("/{path:path}", self.handle, methods=["GET", "POST", "PUT", "DELETE", "PATCH"])],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(base_url=self.upstream, timeout=self._timeout_s) as client:
            self._client = client
            yield

    async def handle(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        body = await request.body()
        payload: dict[str, Any] | None = None
        if request.method == "POST" and "json" in request.headers.get("content-type", "") and body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            payload = parsed if isinstance(parsed, dict) else None
        if payload is not None:
            refused = self._refuse(path, payload)
            if refused is not None:
                logger.info("refused %s: %s", path, refused)
                return refusal(refused)
        try:
            upstream = await self._forward(request, path, body)
        except httpx.TransportError as error:
            detail = f"the SkyRL server at {self.upstream} did not answer ({type(error).__name__}); see its log"
            return JSONResponse({"detail": detail}, status_code=502)
        if payload is not None:
            self._observe(path, payload, upstream)
        return self._amend(path, payload, upstream)

    async def _forward(self, request: Request, path: str, body: bytes) -> httpx.Response:
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        return await self._client.request(
            request.method, path, params=request.query_params.multi_items(), content=body, headers=headers
        )

    def _refuse(self, path: str, payload: Mapping[str, Any]) -> str | None:
        if path == "/api/v1/optim_step":
            if "optimizer_params" in payload:
                return "SkyRL 0.4.0 only runs Adam: optim_step with optimizer_params would be ignored"
            clip = (payload.get("adam_params") or {}).get("grad_clip_norm") or 0.0
            if clip:
                return f"SkyRL 0.4.0 ignores adam_params.grad_clip_norm ({clip}): set it to 0"
        elif path == "/api/v1/create_model":
            lora = payload.get("lora_config") or {}
            ignored = [f"{k}={str(v).lower()}" for k, v in lora.items() if k in SKYRL_LORA_TARGETS and v is not None
                       and bool(v) != SKYRL_LORA_TARGETS[k]]  # fmt: skip
            if ignored:
                return (
                    f"SkyRL 0.4.0 ignores lora_config {', '.join(ignored)}: it always trains attention and MLP and "
                    "never the output layer (agl-tinker: policy.train_unembed=false)"
                )
            optimizer = (payload.get("optimizer_config") or {}).get("type", "adamw")
            if optimizer != "adamw":
                return f"SkyRL 0.4.0 only runs Adam and ignores optimizer_config type {optimizer!r}"
        elif path == "/api/v1/asample":
            for name, default in _IGNORED_SAMPLE_FIELDS.items():
                if payload.get(name, default) not in (default, None):
                    return f"SkyRL 0.4.0 ignores asample {name}={payload[name]!r}"
            return self.state.check_sample(self._sample_target(payload))
        return None

    def _sample_target(self, payload: Mapping[str, Any]) -> tuple[str, str] | None:
        session = payload.get("sampling_session_id")
        if session is not None:
            return self.state.sessions.get(str(session))
        model_path = payload.get("model_path")
        return _sampler_checkpoint(model_path) if isinstance(model_path, str) else None

    def _observe(self, path: str, payload: Mapping[str, Any], response: httpx.Response) -> None:
        """Track futures, sampling sessions and live checkpoints from requests that went through."""
        if response.status_code != 200:
            return
        model_id = payload.get("model_id")
        if path in ("/api/v1/optim_step", "/api/v1/load_weights") and isinstance(model_id, str):
            self.state.weights_changed(model_id)
        elif path == "/api/v1/create_model":
            pass  # its model id arrives with the future's result; its first save marks it tracked
        elif path == "/api/v1/save_weights_for_sampler" and isinstance(model_id, str):
            checkpoint = payload.get("path") or f"ss{payload.get('sampling_session_seq_id')}_seq{payload.get('seq_id')}"
            checkpoint = str(checkpoint).rsplit("/", 1)[-1]
            self.state.live.setdefault(model_id, set()).add(checkpoint)
            future = response.json().get("request_id")
            if payload.get("path") is None and future is not None:
                self.state.sampler_saves[str(future)] = (model_id, checkpoint)
        elif path == "/api/v1/create_sampling_session":
            model_path = payload.get("model_path")
            session = response.json().get("sampling_session_id")
            target = _sampler_checkpoint(model_path) if isinstance(model_path, str) else None
            if session is not None and target is not None:
                self.state.sessions[str(session)] = target
        elif path == "/api/v1/asample" and (payload.get("prompt_logprobs") or payload.get("topk_prompt_logprobs")):
            length = _prompt_length(payload.get("prompt") or {})
            future = response.json().get("request_id")
            if length is not None and future is not None:
                self.state.prompt_lengths[str(future)] = length
        elif path == "/api/v1/retrieve_future":
            future = str(payload.get("request_id"))
            save = self.state.sampler_saves.pop(future, None)
            if save is not None and "json" in response.headers.get("content-type", ""):
                session = response.json().get("sampling_session_id")
                if session is not None:
                    self.state.sessions[str(session)] = save

    def _amend(self, path: str, payload: Mapping[str, Any] | None, response: httpx.Response) -> Response:
        content = response.content
        headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS | {"content-encoding"}}
        if response.status_code == 200 and payload is not None:
            if path == "/api/v1/asample":
                reply = response.json()
                if reply.get("sample_sequence_ids") is None:
                    reply["sample_sequence_ids"] = [uuid.uuid4().hex for _ in range(int(payload.get("num_samples", 1)))]
                    content = json.dumps(reply).encode()
            elif path == "/api/v1/retrieve_future":
                length = self.state.prompt_lengths.pop(str(payload.get("request_id")), None)
                if length is not None and response.headers.get("content-type", "").startswith(PROTO_CONTENT_TYPE):
                    content = restore_leading_prompt_logprob(content, length)
        return Response(content=content, status_code=response.status_code, headers=headers)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="the SkyRL Tinker API server, e.g. http://127.0.0.1:8001")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    proxy = CompatProxy(args.upstream)
    config = uvicorn.Config(proxy.app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
