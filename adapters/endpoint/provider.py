"""The policy provider behind the agent-facing endpoint: chat messages in, policy samples out.

It renders OpenAI chat messages with a tinker-cookbook renderer, samples from whichever
``ports.policy.Sampler`` is current, and answers with a LiteLLM ``ModelResponse`` that carries
``prompt_token_ids``, ``choices[i].token_ids`` and OpenAI-style ``logprobs``: the fields
Agent-lightning's AgentOps instrumentation copies into the ``openai.chat.completion`` span, from
which ``TracerTraceToTriplet`` builds training triplets without re-tokenising anything.
``PolicyProvider.complete`` is the transport-independent core: the lean server
(``adapters.endpoint.server``) calls it directly, and ``acompletion`` adapts it to LiteLLM.

The cookbook's own provider (``tinker_cookbook.third_party.litellm``) is bound to a
``tinker.SamplingClient`` and returns no per-token logprobs, so it cannot serve the port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import litellm
from agentlightning import Span
from litellm.exceptions import BadRequestError, ServiceUnavailableError, Timeout
from litellm.llms.custom_llm import CustomLLM
from litellm.types.llms.custom_llm import CustomLLMItem
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    ChatCompletionTokenLogprob,
    ChoiceLogprobs,
    Choices,
    Message,
    ModelResponse,
    Usage,
)
from litellm.utils import custom_llm_setup
from returns.result import Failure, Success
from tinker_cookbook import renderers

from adapters.cookbook.conversation import openai_conversation
from adapters.endpoint.capture import (
    RolloutCall,
    ServedTurns,
    completion_span,
    normal_message,
    rollout_call,
    tools_key,
)
from adapters.endpoint.seeds import RolloutSeeds
from domain.multiturn import NormalMessage, ServedTurn, TurnMatch, match_served_turn, splice_prompt
from domain.sampling import SamplingDefaults, check_temperature, check_top_k, check_top_p
from ports.policy import SampledSequence, Sampler, SamplingParams, StopReason

T = TypeVar("T")
logger = logging.getLogger(__name__)

RENDER_CACHE_SIZE = 4096
"""Conversations whose rendered prompt tokens the provider remembers (least recently used dropped first)."""
MAX_STOP_STRINGS = 4
"""OpenAI's limit on ``stop`` entries in one request."""


class BadParam(ValueError):
    """A request parameter the endpoint cannot serve; ``param`` names it (OpenAI's error ``param``)."""

    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(message)
        self.param = param


def _int_param(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadParam(name, f"{name} must be an integer, got {type(value).__name__}")
    return value


def _float_param(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadParam(name, f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _checked(name: str, check: Callable[[Any], object], value: object) -> None:
    try:
        check(value)
    except ValueError as error:
        raise BadParam(name, str(error)) from error


def stop_strings(value: object) -> tuple[str, ...]:
    """The request's ``stop`` entries (OpenAI: a string or up to four strings)."""
    if value is None:
        return ()
    if not isinstance(value, str | list | tuple):
        raise BadParam("stop", f"stop must be a string or a list of at most {MAX_STOP_STRINGS} strings")
    entries: list[object] = [value] if isinstance(value, str) else list(cast(Sequence[object], value))
    if len(entries) > MAX_STOP_STRINGS:
        raise BadParam("stop", f"stop must be a string or a list of at most {MAX_STOP_STRINGS} strings")
    if not all(isinstance(s, str) and s for s in entries):
        raise BadParam("stop", "stop entries must be non-empty strings")
    return tuple(cast(list[str], entries))


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first request stop string, which OpenAI leaves out of the returned content."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """The validated sampling part of one chat-completion request."""

    params: SamplingParams
    num_samples: int


def sampling_request(
    optional_params: Mapping[str, object],
    defaults: SamplingDefaults,
    renderer_stops: Sequence[str] | Sequence[int],
) -> SamplingRequest:
    """Request parameters, checked against ``defaults``' bounds, merged with the renderer's stops.

    Raises ``BadParam`` naming the offending parameter; the provider turns it into HTTP 400.
    """
    max_tokens = defaults.max_tokens
    for key in ("max_completion_tokens", "max_tokens"):
        if optional_params.get(key) is not None:
            max_tokens = _int_param(key, optional_params[key])
            break
    if not 1 <= max_tokens <= defaults.max_tokens_limit:
        raise BadParam("max_tokens", f"max_tokens {max_tokens} must lie in [1, {defaults.max_tokens_limit}]")
    temperature = defaults.temperature
    if optional_params.get("temperature") is not None:
        temperature = _float_param("temperature", optional_params["temperature"])
        _checked("temperature", check_temperature, temperature)
    top_p = defaults.top_p
    if optional_params.get("top_p") is not None:
        top_p = _float_param("top_p", optional_params["top_p"])
        _checked("top_p", check_top_p, top_p)
    top_k = defaults.top_k
    if optional_params.get("top_k") is not None:
        top_k = _int_param("top_k", optional_params["top_k"])
        _checked("top_k", check_top_k, top_k)
    seed = defaults.seed
    if optional_params.get("seed") is not None:
        seed = _int_param("seed", optional_params["seed"])
    num_samples = 1
    if optional_params.get("n") is not None:
        num_samples = _int_param("n", optional_params["n"])
        if not 1 <= num_samples <= defaults.max_samples:
            raise BadParam("n", f"n {num_samples} must lie in [1, {defaults.max_samples}]")
    request_stops = stop_strings(optional_params.get("stop"))
    stop_token_ids = tuple(s for s in renderer_stops if isinstance(s, int))
    renderer_stop_strings = tuple(s for s in renderer_stops if isinstance(s, str))
    return SamplingRequest(
        params=SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            stop_token_ids=stop_token_ids,
            stop_strings=tuple(dict.fromkeys(renderer_stop_strings + request_stops)),
            seed=seed,
        ),
        num_samples=num_samples,
    )


CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def check_messages(messages: object) -> None:
    """Refuse what no renderer can turn into a prompt, naming the problem (the provider answers 400)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise BadParam("messages", "messages must be a non-empty list of chat messages")
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in CHAT_ROLES:
            raise BadParam(
                f"messages[{index}].role", f"messages[{index}] has role {role!r}; expected one of {sorted(CHAT_ROLES)}"
            )
        content = cast(Mapping[str, object], message).get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind != "text":
                    where = f"messages[{index}].content[{j}].type"
                    raise BadParam(where, f"{where} {kind!r} is not served: the policy reads text parts only")


def prompt_tokens(renderer: renderers.Renderer, messages: Sequence[Mapping[str, object]], tools: object) -> list[int]:
    """Render OpenAI chat messages (and tool declarations) into the generation prompt's tokens."""
    return renderer.build_generation_prompt(openai_conversation(renderer, messages, tools)).to_ints()


def _token_logprobs(renderer: renderers.Renderer, sequence: SampledSequence) -> ChoiceLogprobs:
    """OpenAI-shaped logprobs. ``top_logprobs`` stay empty: the port samples no alternatives."""
    texts = renderer.tokenizer.batch_decode([[t] for t in sequence.tokens])
    return ChoiceLogprobs(
        content=[
            ChatCompletionTokenLogprob(token=text, bytes=list(text.encode("utf-8")), logprob=logprob, top_logprobs=[])
            for text, logprob in zip(texts, sequence.logprobs, strict=True)
        ]
    )


def _choice(renderer: renderers.Renderer, index: int, sequence: SampledSequence, stops: Sequence[str]) -> Choices:
    parsed, _termination = renderer.parse_response(list(sequence.tokens))
    content = parsed.get("content", "")
    text = cut_at_stop(content if isinstance(content, str) else renderers.format_content_as_string(content), stops)
    tool_calls = [
        ChatCompletionMessageToolCall(
            id=call.id or f"call_{uuid.uuid4().hex[:12]}",
            type="function",
            function={"name": call.function.name, "arguments": call.function.arguments},
        )
        for call in parsed.get("tool_calls") or []
    ]
    if tool_calls:
        finish_reason = "tool_calls"
    else:
        finish_reason = "length" if sequence.stop_reason is StopReason.LENGTH else "stop"
    return Choices(
        index=index,
        finish_reason=finish_reason,
        message=Message(role="assistant", content=text or None, tool_calls=tool_calls or None),
        logprobs=_token_logprobs(renderer, sequence),
        token_ids=list(sequence.tokens),
    )


def model_response(
    renderer: renderers.Renderer,
    model: str,
    prompt_token_ids: Sequence[int],
    sequences: Sequence[SampledSequence],
    fingerprint: str,
    stops: Sequence[str] = (),
) -> ModelResponse:
    """The LiteLLM response carrying the exact tokens and logprobs the sampler produced.

    ``stops``: the request's stop strings, cut from each choice's content as OpenAI does; the
    choice's ``token_ids`` and ``logprobs`` stay the sampled ones (what is trained on).
    """
    completion_tokens = sum(len(s.tokens) for s in sequences)
    return ModelResponse(
        id=f"chatcmpl-policy-{uuid.uuid4().hex}",
        model=model,
        system_fingerprint=fingerprint,
        choices=[_choice(renderer, i, s, stops) for i, s in enumerate(sequences)],
        usage=Usage(
            prompt_tokens=len(prompt_token_ids),
            completion_tokens=completion_tokens,
            total_tokens=len(prompt_token_ids) + completion_tokens,
        ),
        prompt_token_ids=list(prompt_token_ids),
    )


class CompletionError(Exception):
    """A request the provider cannot serve; each transport maps the subclasses to its own errors.

    ::

        CompletionError
        ├── BadCompletionRequest   the request itself is wrong (HTTP 400)
        ├── NoPolicy               no sampler is set yet (HTTP 503 on the lean server)
        ├── PolicyFailed           the policy backend failed to sample (HTTP 502)
        └── SamplingTimeout        the sampler ran past the request timeout (HTTP 504)
    """


class BadCompletionRequest(CompletionError):
    """Messages or parameters no renderer or sampler can serve; the message names the reason, ``param`` the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class NoPolicy(CompletionError):
    """No policy sampler is set yet."""


class PolicyFailed(CompletionError):
    """The sampler raised (a remote backend's protocol error, say); the message is one line naming the cause."""


class SamplingTimeout(CompletionError):
    """Sampling took longer than the provider's request timeout."""


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """What one request samples with; replaced whole, so a request never mixes two versions."""

    sampler: Sampler | None
    defaults: SamplingDefaults
    version: int


class LoopBridge:
    """Runs a sampler's coroutines on the loop that owns the sampler, from any thread's loop.

    The proxy serves requests on its own event loop in a thread; samplers (torch models, tinker
    clients, asyncio locks) belong to the training loop. Awaiting their coroutines on the proxy's
    loop would tie loop-bound state to the wrong loop, so requests hop to the owner's loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def run(self, make: Callable[[], Coroutine[object, object, T]], timeout_s: float) -> T:
        """``await make()`` on the owner loop; ``TimeoutError`` after ``timeout_s``."""
        if asyncio.get_running_loop() is self._loop:
            return await asyncio.wait_for(make(), timeout_s)
        if self._loop.is_closed() or not self._loop.is_running():
            raise RuntimeError("the event loop that owns the sampler is not running")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(make(), self._loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        finally:
            future.cancel()


class PolicyProvider(CustomLLM):
    """LiteLLM ``CustomLLM`` that serves the current ``PolicySnapshot`` through a renderer."""

    def __init__(
        self,
        renderer: renderers.Renderer,
        snapshot: PolicySnapshot,
        bridge: LoopBridge | None = None,
        request_timeout_s: float = 300.0,
        recorder: Callable[[Span], Coroutine[object, object, object]] | None = None,
        sequence_ids: Callable[[str, str], Coroutine[object, object, int]] | None = None,
        eval_temperature: float | None = None,
    ) -> None:
        """``recorder`` stores each completion record (``LightningStore.add_span``), on the owner loop;
        ``sequence_ids`` numbers it (``LightningStore.get_next_span_sequence_id``) once it is sampled;
        ``eval_temperature`` is the default temperature of requests made for evaluation (``complete``)."""
        super().__init__()
        self._renderer = renderer
        self._renderer_stops = renderer.get_stop_sequences()
        self._snapshot = snapshot
        self._bridge = bridge
        self._request_timeout_s = request_timeout_s
        self._lock = threading.Lock()
        self._recorder = recorder
        self._sequence_ids = sequence_ids
        self._eval_temperature = eval_temperature
        self._served = ServedTurns()
        self._seeds = RolloutSeeds()
        self._end_of_turn = frozenset(s for s in self._renderer_stops if isinstance(s, int))
        self._counters: Counter[str] = Counter()
        self._last_failure: str | None = None
        self._renders: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    @property
    def snapshot(self) -> PolicySnapshot:
        return self._snapshot

    def bind_loop(self, bridge: LoopBridge | None) -> None:
        self._bridge = bridge

    def set_sampler(self, sampler: Sampler) -> int:
        """Serve ``sampler`` from the next request on; returns the new policy version."""
        with self._lock:
            self._snapshot = replace(self._snapshot, sampler=sampler, version=self._snapshot.version + 1)
            return self._snapshot.version

    def set_defaults(self, defaults: SamplingDefaults) -> None:
        with self._lock:
            self._snapshot = replace(self._snapshot, defaults=defaults)

    def register(self, provider_name: str) -> None:
        """Put this handler under ``provider_name`` in LiteLLM, leaving other providers alone."""
        entry = CustomLLMItem(provider=provider_name, custom_handler=self)
        current = [item for item in litellm.custom_provider_map if item["provider"] != provider_name]
        litellm.custom_provider_map = [*current, entry]
        cast(Callable[[], None], custom_llm_setup)()

    def unregister(self, provider_name: str) -> None:
        litellm.custom_provider_map = [
            item
            for item in litellm.custom_provider_map
            if not (item["provider"] == provider_name and item["custom_handler"] is self)
        ]

    def seed_rollouts(self, seeds: Mapping[str, int]) -> None:
        """Sample these rollouts' requests from their own seeds (``adapters.endpoint.seeds``)."""
        self._seeds.assign(seeds)

    def forget(self, rollout_ids: Sequence[str]) -> None:
        """Drop the served turns and seeds of these finished rollouts."""
        self._served.forget(rollout_ids)
        self._seeds.forget(rollout_ids)

    @property
    def rollouts_held(self) -> int:
        """Rollouts whose served turns are held (for multi-turn prompts)."""
        return len(self._served)

    def take_counters(self) -> dict[str, int]:
        """Counts of attribution and multi-turn outcomes since the last call."""
        with self._lock:
            counters, self._counters = dict(self._counters), Counter()
        return counters

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    @property
    def last_failure(self) -> str | None:
        """The policy backend's failure on the latest request that reached it, if that request failed."""
        return self._last_failure

    def _note_failure(self, error: BaseException) -> None:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if message != self._last_failure:
            logger.warning("the policy backend failed: %s", message)
        self._last_failure = message
        self._count("sample/backend_failed")

    async def acompletion(self, *args: object, **kwargs: object) -> ModelResponse:
        """LiteLLM's entry point for ``/v1/chat/completions``: its kwargs parsed over ``complete``."""
        model = str(kwargs.get("model", ""))
        optional_params = cast(Mapping[str, object], kwargs.get("optional_params") or {})
        try:
            return await self.complete(
                model,
                kwargs.get("messages") or [],
                optional_params,
                rollout_call(kwargs.get("litellm_params")),
            )
        except (BadCompletionRequest, NoPolicy) as error:
            raise BadRequestError(message=str(error), model=model, llm_provider="agl-tinker") from error
        except SamplingTimeout as error:
            raise Timeout(message=str(error), model=model, llm_provider="agl-tinker") from error
        except PolicyFailed as error:
            raise ServiceUnavailableError(message=str(error), model=model, llm_provider="agl-tinker") from error

    async def complete(
        self,
        model: str,
        messages: object,
        params: Mapping[str, object],
        call: RolloutCall | None,
        *,
        evaluation: bool = False,
    ) -> ModelResponse:
        """Serve one chat completion, whatever the transport.

        ``params`` holds the OpenAI request parameters (``max_tokens``, ``temperature``, ``n``,
        ``stop``, ``tools``, ...). A completion served to a rollout (``call``) is recorded in the
        store before this returns. ``evaluation`` (a 1.x agent's ``mode/val`` URL) samples at the
        evaluation temperature by default.

        Raises:
            BadCompletionRequest: the request cannot be served (the reason is the message).
            NoPolicy: no sampler is set yet.
            SamplingTimeout: the sampler took longer than the request timeout.
        """
        started = time.time()
        snapshot = self._snapshot
        try:
            check_messages(messages)
            messages_G = cast(Sequence[Mapping[str, object]], messages)
            defaults = snapshot.defaults
            if evaluation and self._eval_temperature is not None:
                defaults = defaults.with_temperature(self._eval_temperature)
            request = sampling_request(params, defaults, self._renderer_stops)
            tools = params.get("tools")
            normal_G = tuple(normal_message(m) for m in messages_G)
            tokens_P, prefix, extends = self._prompt(call, messages_G, normal_G, tools)
            limit = snapshot.defaults.max_prompt_tokens
            if limit is not None and len(tokens_P) > limit:
                raise BadParam("messages", f"the prompt has {len(tokens_P)} tokens; this policy serves at most {limit}")
        except BadParam as error:
            raise BadCompletionRequest(str(error), error.param) from error
        except (ValueError, KeyError, TypeError) as error:
            raise BadCompletionRequest(str(error)) from error
        sampler = snapshot.sampler
        if sampler is None:
            raise NoPolicy("no policy sampler is set yet")
        request = self._seeded(request, call, snapshot.version)

        def call_sampler() -> Coroutine[object, object, Sequence[SampledSequence]]:
            return _sample(sampler, tokens_P, request)

        try:
            sequences = await self._on_owner_loop(call_sampler)
        except SamplingTimeout:
            raise
        except Exception as error:  # the backend's own failure: one line to the agent and the run, no traceback
            self._note_failure(error)
            raise PolicyFailed(f"the policy backend failed: {error}") from error
        self._last_failure = None
        stops = stop_strings(params.get("stop"))
        response = model_response(self._renderer, model, tokens_P, sequences, f"policy-v{snapshot.version}", stops)
        if call is None:
            self._count("capture/unattributed")
            return response
        self._count(f"prefix/{prefix}")
        call = await self._numbered(call)
        spans: list[Span] = []
        for index, (sequence, reply) in enumerate(zip(sequences, response.choices, strict=True)):
            # Every choice is served and recorded; which one the agent kept shows when a later turn
            # continues it (``domain.multiturn.kept_choices``), and only that one is trained.
            self._served.add(
                call,
                ServedTurn(
                    messages=normal_G,
                    tools=tools_key(tools),
                    prompt=tuple(tokens_P),
                    sampled=tuple(sequence.tokens),
                    reply=normal_message(cast(Mapping[str, object], reply.message.model_dump())),
                    sequence_id=call.sequence_id,
                    choice=index,
                ),
            )
            spans.append(
                completion_span(
                    call,
                    model=model,
                    prompt=tokens_P,
                    sampled=sequence.tokens,
                    logprobs=sequence.logprobs,
                    finish_reason=str(reply.finish_reason),
                    policy_version=snapshot.version,
                    prefix=prefix,
                    start_time=started,
                    choice=index,
                    n_choices=len(sequences),
                    extends=extends,
                    response_id=response.id,
                )
            )
        await self._record(spans)
        return response

    def _seeded(self, request: SamplingRequest, call: RolloutCall | None, version: int) -> SamplingRequest:
        """``request`` with its rollout's seed for this turn, unless it brought its own or the rollout has none."""
        if call is None or request.params.seed is not None:
            return request
        turn = sum(1 for served in self._served.of(call) if served.choice == 0)
        seed = self._seeds.seed_of(call.rollout_id, call.attempt_id, version, turn)
        if seed is None:
            if len(self._seeds):
                self._count("sample/unseeded_rollout")
            return request
        return replace(request, params=replace(request.params, seed=seed))

    def _rendered(self, messages: Sequence[Mapping[str, object]], tools: object) -> list[int]:
        """``prompt_tokens``, remembered for recent conversations: a GRPO group sends the same first prompt
        ``group_size`` times, and rendering (chat template, tokenizer) is most of a request's CPU."""
        try:
            key = json.dumps([messages, tools], sort_keys=True)
        except (TypeError, ValueError):
            return prompt_tokens(self._renderer, messages, tools)
        with self._lock:
            cached = self._renders.get(key)
            if cached is not None:
                self._renders.move_to_end(key)
                return list(cached)
        tokens = prompt_tokens(self._renderer, messages, tools)
        with self._lock:
            self._renders[key] = tuple(tokens)
            if len(self._renders) > RENDER_CACHE_SIZE:
                self._renders.popitem(last=False)
        return tokens

    def _prompt(
        self,
        call: RolloutCall | None,
        messages: Sequence[Mapping[str, object]],
        normal_G: tuple[NormalMessage, ...],
        tools: object,
    ) -> tuple[list[int], str, tuple[int, int] | None]:
        """The prompt tokens: extending the rollout's served turn token for token when the history allows.

        Also how it was built, and the ``(sequence_id, choice)`` of the served choice it extends.
        """
        full = self._rendered(messages, tools)
        if call is None:
            return full, "unattributed", None
        match match_served_turn(normal_G, tools_key(tools), self._served.of(call)):
            case Success(None):
                return full, "first_turn", None
            case Success(TurnMatch() as found):
                prefix = self._rendered(messages[: found.n_prefix_messages], tools)
                match splice_prompt(found.turn, prefix, full, self._end_of_turn):
                    case Success(spliced):
                        return list(spliced), "extended", (found.turn.sequence_id, found.turn.choice)
                    case Failure(reason):
                        return full, f"broken/{reason.value}", None
            case Failure(reason):
                return full, f"broken/{reason.value}", None
        raise AssertionError("unreachable")

    async def _on_owner_loop(self, make: Callable[[], Coroutine[object, object, T]]) -> T:
        try:
            if self._bridge is None:
                return await asyncio.wait_for(make(), self._request_timeout_s)
            return await self._bridge.run(make, self._request_timeout_s)
        except TimeoutError as error:
            raise SamplingTimeout(f"sampling took longer than {self._request_timeout_s} s") from error

    async def _numbered(self, call: RolloutCall) -> RolloutCall:
        """``call`` with the store's next sequence id for its rollout, taken now that the reply is sampled.

        Rewards take theirs when emitted, so a reward numbered above this call came after the agent had
        its reply, on any machine's clock (``domain.reward_order``). Without the number (no store, or it
        failed) the call keeps the one it came with.
        """
        sequence_ids = self._sequence_ids
        if sequence_ids is None:
            return call

        def take() -> Coroutine[object, object, int]:
            return sequence_ids(call.rollout_id, call.attempt_id)

        try:
            return replace(call, sequence_id=await self._on_owner_loop(take))
        except Exception as error:  # the store's own errors vary by backend; the reply must still go out
            self._count("capture/unnumbered")
            logger.warning("could not number the completion of rollout %s: %s", call.rollout_id, error)
            return call

    async def _record(self, spans: Sequence[Span]) -> None:
        """Store the completion records before the agent sees the reply; a failure is counted, not raised."""
        recorder = self._recorder
        if recorder is None or not spans:
            return

        async def write() -> None:
            for span in spans:
                await recorder(span)

        try:
            await self._on_owner_loop(write)
        except Exception as error:  # the store's own errors vary by backend; the reply must still go out
            self._count("capture/failed")
            logger.warning("could not record the completion of rollout %s: %s", spans[0].rollout_id, error)
        else:
            self._count("capture/recorded", len(spans))


async def _sample(sampler: Sampler, tokens_P: Sequence[int], request: SamplingRequest) -> Sequence[SampledSequence]:
    return await sampler.sample(tokens_P, request.params, request.num_samples)
