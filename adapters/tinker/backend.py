"""The policy ports (``Trainer``, ``Sampler``) bound to the tinker 0.38 SDK.

Works against the hosted Tinker service or any Tinker-compatible ``base_url``. Every call that
reaches the server is bounded in time: against an unreachable server the SDK blocks for about
five minutes inside ``create_lora_training_client`` (the session handshake waits synchronously),
so connecting runs in a daemon thread and fails with ``TinkerUnavailable`` after
``connect_timeout_s``. While calls run, ``ServerLiveness`` watches that the server still takes
connections, so one that has gone away ends them after ``unreachable_after_s`` instead of at their
bounds (minutes). The API key comes only from ``TINKER_API_KEY`` and never appears in a
repr, a log line or an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, cast

import tinker
from tinker import types
from tinker.lib.base_url import DEFAULT_BASE_URL

from adapters.tinker.coalescing import DEFAULT_WINDOW_S, CoalescingSampler
from adapters.tinker.liveness import DEFAULT_GIVE_UP_AFTER_S, ServerLiveness, ServerUnreachable
from ports.policy import (
    AdamParams,
    ForwardBackwardOutput,
    LossName,
    SampledSequence,
    SamplingParams,
    StopReason,
    TrainingDatum,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

API_KEY_ENV = "TINKER_API_KEY"
BASE_URL_ENV = "TINKER_BASE_URL"

SessionOutcome = Literal["success", "errored", "interrupted"]
"""How a session ends, as the SDK reports it to the server."""

CLOSE_TIMEOUT_S = 5.0
"""Bound on finishing a session: a server that is gone is not waited for at the end of a run."""

_RL_KEYS = ("target_tokens", "logprobs", "advantages", "mask")
_SFT_KEYS = ("target_tokens", "weights")


class TinkerError(RuntimeError):
    """A Tinker call failed; the message never contains credentials."""


class TinkerUnavailable(TinkerError):
    """The server could not be reached, or did not answer within the configured timeout."""


@dataclass(frozen=True, slots=True)
class TinkerConfig:
    """Which model to train and how long to wait for the server."""

    base_model: str
    lora_rank: int = 32
    train_unembed: bool = True
    """LoRA on the output layer as well as attention and MLP (the SDK's default)."""
    base_url: str | None = None
    """None: ``TINKER_BASE_URL`` or the SDK's default (the hosted service)."""
    seed: int | None = None
    connect_timeout_s: float = 60.0
    """Bound on creating the session and the LoRA training client."""
    request_timeout_s: float = 900.0
    """Bound on one training call (forward-backward, optimizer step, checkpoint)."""
    sample_timeout_s: float = 300.0
    unreachable_after_s: float = DEFAULT_GIVE_UP_AFTER_S
    """A call in flight fails once the server has taken no connection for this long (0: only the bounds apply)."""
    coalesce_window_s: float = DEFAULT_WINDOW_S
    """How long a sample request waits to share one call with others for the same prompt (0: never)."""
    ttl_seconds: int | None = None
    """Lifetime of saved checkpoints on the server; None keeps them."""


# ---------------------------------------------------------------------------------------------
# Conversions between the port's types and tinker's, matching what tinker-cookbook builds.
# ---------------------------------------------------------------------------------------------


def _tensor(values: Sequence[float] | Sequence[int], dtype: types.TensorDtype) -> types.TensorData:
    return types.TensorData(data=list(values), dtype=dtype, shape=[len(values)])


def datum_to_tinker(datum: TrainingDatum, loss: LossName) -> types.Datum:
    """A ``tinker.Datum`` laid out as the cookbook lays it out for ``loss``.

    RL losses (``rl.data_processing``): ``target_tokens`` int64, ``logprobs``, ``advantages``,
    ``mask`` float32. Cross-entropy (``supervised.common``): ``target_tokens`` int64 and
    ``weights`` float32. Every tensor is 1-D with the length of ``model_input``.
    """
    n = len(datum.model_input)
    if n == 0:
        raise ValueError("a datum needs at least one input token")
    inputs: dict[str, types.TensorData] = {"target_tokens": _tensor(datum.target_tokens, "int64")}
    if loss is LossName.CROSS_ENTROPY:
        weights = datum.weights or tuple(1.0 for _ in range(n))
        inputs["weights"] = _tensor(weights, "float32")
    else:
        for key, values in (("logprobs", datum.logprobs), ("advantages", datum.advantages), ("mask", datum.mask)):
            inputs[key] = _tensor(values, "float32")
    for key, tensor in inputs.items():
        if tensor.shape != [n]:
            raise ValueError(f"{key} has length {(tensor.shape or [0])[0]}, model_input has {n}")
    return types.Datum(model_input=types.ModelInput.from_ints(list(datum.model_input)), loss_fn_inputs=inputs)


def _without_mask(datum: types.Datum) -> types.Datum:
    """What the server's losses accept: the cookbook drops ``mask`` (it only feeds KL metrics) before sending."""
    if "mask" not in datum.loss_fn_inputs:
        return datum
    inputs = {k: v for k, v in datum.loss_fn_inputs.items() if k != "mask"}
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


def datum_from_tinker(datum: types.Datum) -> TrainingDatum:
    """The port's view of a ``tinker.Datum`` (float32 values come back as Python floats)."""
    inputs = datum.loss_fn_inputs

    def floats(key: str) -> tuple[float, ...]:
        return tuple(float(x) for x in inputs[key].data) if key in inputs else ()

    return TrainingDatum(
        model_input=tuple(datum.model_input.to_ints()),
        target_tokens=tuple(int(x) for x in inputs["target_tokens"].data),
        weights=floats("weights"),
        logprobs=floats("logprobs"),
        advantages=floats("advantages"),
        mask=floats("mask"),
    )


def sampling_params_to_tinker(params: SamplingParams) -> types.SamplingParams:
    """Tinker's ``SamplingParams``. Empty stops become ``None``: tinker's ``[]`` disables EOS."""
    if params.stop_token_ids and params.stop_strings:
        raise ValueError(
            "tinker takes stop token ids or stop strings, not both: "
            f"got ids {list(params.stop_token_ids)} and strings {list(params.stop_strings)}"
        )
    stop: list[int] | list[str] | None = list(params.stop_token_ids) or list(params.stop_strings) or None
    return types.SamplingParams(
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=params.seed,
        stop=stop,
    )


def sequences_from_tinker(response: types.SampleResponse) -> list[SampledSequence]:
    """The port's sequences; a sequence without logprobs is an error (training needs them)."""
    out: list[SampledSequence] = []
    for seq in response.sequences:
        if seq.logprobs is None:
            raise TinkerError("the server returned a sequence without logprobs")
        out.append(
            SampledSequence(
                tokens=tuple(int(t) for t in seq.tokens),
                logprobs=tuple(float(x) for x in seq.logprobs),
                stop_reason=StopReason(seq.stop_reason),
            )
        )
    return out


def adam_to_tinker(params: AdamParams) -> types.AdamParams:
    return types.AdamParams(
        learning_rate=params.learning_rate,
        beta1=params.beta1,
        beta2=params.beta2,
        eps=params.eps,
        weight_decay=params.weight_decay,
        grad_clip_norm=params.grad_clip_norm,
    )


def forward_backward_from_tinker(output: types.ForwardBackwardOutput) -> ForwardBackwardOutput:
    return ForwardBackwardOutput(
        logprobs_D=tuple(tuple(float(x) for x in out["logprobs"].data) for out in output.loss_fn_outputs),
        metrics={k: float(v) for k, v in output.metrics.items()},
    )


# ---------------------------------------------------------------------------------------------
# Bounded calls.
# ---------------------------------------------------------------------------------------------


async def in_daemon_thread(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run a blocking SDK call in a daemon thread; ``TinkerUnavailable`` after ``timeout_s``.

    A daemon thread, not the loop's executor: an abandoned call must not keep the interpreter
    from exiting (executor threads are joined at exit, and the SDK can block for minutes).
    """
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(cast(T, value))

    def target() -> None:
        value: T | None = None
        failure: BaseException | None = None
        try:
            value = fn()
        except BaseException as error:  # handed to the awaiting coroutine, not swallowed
            failure = error
        with contextlib.suppress(RuntimeError):  # the loop closed while the call was abandoned
            loop.call_soon_threadsafe(settle, value, failure)

    threading.Thread(target=target, name=f"tinker-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(result, timeout_s)
    except TimeoutError as error:
        raise TinkerUnavailable(f"tinker {what} did not finish within {timeout_s:g} s") from error


def server_name(base_url: str | None) -> str:
    """How errors name the server: its URL, or the hosted service when none is configured."""
    return base_url or os.environ.get(BASE_URL_ENV) or "the hosted Tinker service"


def server_url(base_url: str | None) -> str:
    """The URL the SDK talks to: ``base_url``, ``TINKER_BASE_URL`` or the SDK's default."""
    return base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL


def describe_failure(error: BaseException) -> str:
    """One line for any SDK failure: its type and the first line of its message (no traceback)."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > 400:
        text = text[:400] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def tinker_failure(error: BaseException, what: str, server: str) -> TinkerError:
    """The ``TinkerError`` for a failed call: one line naming the server and the call."""
    if isinstance(error, TinkerError):
        return error
    if isinstance(error, ServerUnreachable):
        return TinkerUnavailable(f"tinker {what}: {error}")
    if isinstance(error, TimeoutError):
        return TinkerUnavailable(f"tinker {what} at {server} timed out")
    if isinstance(error, tinker.APIConnectionError):
        return TinkerUnavailable(f"tinker {what}: cannot reach the server at {server} ({type(error).__name__})")
    if isinstance(error, tinker.AuthenticationError):
        return TinkerError(f"tinker {what}: {server} rejected the credentials from {API_KEY_ENV}")
    return TinkerError(f"tinker {what} at {server} failed: {describe_failure(error)}")


async def _bounded(awaitable: Awaitable[T], timeout_s: float, what: str, server: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError as error:
        raise TinkerUnavailable(f"tinker {what} at {server} did not finish within {timeout_s:g} s") from error
    except Exception as error:  # AssertionErrors and protocol errors of the SDK included: one line each
        raise tinker_failure(error, what, server) from error


def loss_from_outputs(data_D: Sequence[TrainingDatum], logprobs_D: Sequence[Sequence[float]], loss: LossName) -> float:
    """Tinker's summed loss, from the per-token logprobs a server returned (for servers that send no ``loss:sum``)."""
    import torch

    from adapters.local.losses import build_inputs, token_losses

    if not data_D:
        return 0.0
    inputs = build_inputs(list(data_D), loss, torch.float64)
    width = inputs.targets.shape[1]
    rows = [list(row) + [0.0] * (width - len(row)) for row in logprobs_D]
    target_logprobs = torch.tensor(rows, dtype=torch.float64) * inputs.valid
    return float(token_losses(loss, target_logprobs, inputs).sum())


# ---------------------------------------------------------------------------------------------
# The adapters.
# ---------------------------------------------------------------------------------------------


class TinkerSampler:
    """``Sampler`` and ``LogprobScorer`` over one ``tinker.SamplingClient`` (one published set of weights)."""

    def __init__(
        self,
        client: tinker.SamplingClient,
        *,
        timeout_s: float = 300.0,
        name: str = "",
        server: str = "",
        liveness: ServerLiveness | None = None,
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._server = server or server_name(None)
        self._liveness = liveness or ServerLiveness(server_url(None), give_up_after_s=0)
        self.name = name

    @property
    def client(self) -> tinker.SamplingClient:
        return self._client

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        async def call() -> types.SampleResponse:
            future = self._client.sample(
                prompt=types.ModelInput.from_ints(list(prompt_tokens)),
                num_samples=num_samples,
                sampling_params=sampling_params_to_tinker(params),
            )
            return await future.result_async()

        response = await _bounded(self._liveness.guard(call()), self._timeout_s, "sample", self._server)
        return sequences_from_tinker(response)

    async def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Logprob of each token given the ones before it (``None`` for the first), for KL penalties."""

        async def call() -> Sequence[float | None]:
            scored = await self._client.compute_logprobs(types.ModelInput.from_ints(list(tokens)))
            return cast(Sequence[float | None], scored)

        scored = await _bounded(self._liveness.guard(call()), self._timeout_s, "compute_logprobs", self._server)
        return list(scored)

    def __repr__(self) -> str:
        return f"TinkerSampler(name={self.name!r})"


def _quiet_deprecation(record: logging.LogRecord) -> bool:
    return "DEPRECATED" not in record.getMessage()


def _not_reraised(record: logging.LogRecord) -> bool:
    """The SDK logs every non-retryable failure at ERROR before raising it; this adapter raises it as one line."""
    return "non-retryable error" not in record.getMessage()


logging.getLogger("tinker.lib.retry_handler").addFilter(_not_reraised)


_NOT_OFFERED = (tinker.NotFoundError, tinker.UnprocessableEntityError)
"""What a server without ``create_training_client_from_state*`` answers it with (SkyRL 0.4.0: 422)."""


class TinkerTrainer:
    """``Trainer`` over a tinker LoRA ``TrainingClient``. Build it with ``await connect(config)``.

    Loading a state never goes into a client that has already trained: ``load_state`` opens a fresh
    training client from the checkpoint (``create_training_client_from_state_with_optimizer``); on a
    server that lacks that call it loads the state as a fresh LoRA client's first request, the one
    place where the deprecated ``load_state_with_optimizer`` is safe. The KL reference is a sampling
    client of its own (``scorer``), never loaded into the training client.
    """

    def __init__(self, config: TinkerConfig, service: tinker.ServiceClient, client: tinker.TrainingClient) -> None:
        self._config = config
        self._service = service
        self._client = client
        self._fresh = True
        """No request has gone to ``_client`` yet (loading a state into it is safe)."""
        self._server = server_name(config.base_url)
        self._liveness = ServerLiveness(server_url(config.base_url), give_up_after_s=config.unreachable_after_s)

    @classmethod
    async def connect(cls, config: TinkerConfig) -> TinkerTrainer:
        """Open a session, check the server serves the model, and open a LoRA training client.

        Raises ``TinkerUnavailable`` after ``connect_timeout_s``, ``TinkerError`` (one line naming the server)
        when the server refuses the model or the rank.
        """
        if not math.isfinite(config.connect_timeout_s) or config.connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be a positive number of seconds")
        base_url = config.base_url or os.environ.get(BASE_URL_ENV) or None
        api_key = os.environ.get(API_KEY_ENV) or None
        server = server_name(config.base_url)

        def open_service() -> tinker.ServiceClient:
            service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
            try:
                # Not tinker.RestClient(base_url=...): tinker 0.38 builds those under one process-wide lock held
                # while it fetches the server's config, so a connect abandoned against an unreachable server
                # would block every later one in this process for minutes. This client's holder has no such lock.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    capabilities = service.get_server_capabilities()
                check_capabilities(capabilities, config, server)
            except BaseException:
                service.close("errored")  # the SDK finishes it in the background; nothing is left heartbeating
                raise
            return service

        service = await _connect_call(open_service, config.connect_timeout_s, "get_server_capabilities", server)

        def create() -> tinker.TrainingClient:
            return service.create_lora_training_client(
                base_model=config.base_model,
                rank=config.lora_rank,
                seed=config.seed,
                train_unembed=config.train_unembed,
            ).result()

        try:
            client = await _connect_call(create, config.connect_timeout_s, "create_lora_training_client", server)
        except BaseException:
            await finish_session(service, "errored", server)
            raise
        logger.info("tinker training client ready for %s (rank %d) at %s", config.base_model, config.lora_rank, server)
        return cls(config, service, client)

    @property
    def config(self) -> TinkerConfig:
        return self._config

    async def _train_call(self, fn: Callable[[], T], what: str) -> T:
        self._fresh = False
        try:
            return await self._liveness.guard(in_daemon_thread(fn, self._config.request_timeout_s, what))
        except TinkerUnavailable as error:
            raise TinkerUnavailable(f"{error} (server {self._server})") from error
        except Exception as error:
            raise tinker_failure(error, what, self._server) from error

    async def forward_backward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput:
        datums = [_without_mask(datum_to_tinker(d, loss)) for d in data_D]
        output = await self._train_call(
            lambda: self._client.forward_backward(datums, loss_fn=loss.value).result(),
            "forward_backward",
        )
        result = forward_backward_from_tinker(output)
        if "loss:sum" in result.metrics:
            return result
        loss_sum = loss_from_outputs(data_D, result.logprobs_D, loss)
        return ForwardBackwardOutput(logprobs_D=result.logprobs_D, metrics={**result.metrics, "loss:sum": loss_sum})

    async def optim_step(self, params: AdamParams) -> Mapping[str, float]:
        response = await self._train_call(
            lambda: self._client.optim_step(adam_params=adam_to_tinker(params)).result(), "optim_step"
        )
        return {k: float(v) for k, v in (response.metrics or {}).items()}

    async def sampler(self, name: str) -> CoalescingSampler:
        """A sampler on the current weights (``name`` labels it here; the SDK's snapshots are unnamed).

        Concurrent requests for the same prompt share one SDK call (``adapters.tinker.coalescing``)."""
        client = await self._train_call(
            lambda: self._client.save_weights_and_get_sampling_client().result(),
            "save_weights_and_get_sampling_client",
        )
        return CoalescingSampler(self._sampler(client, name), window_s=self._config.coalesce_window_s)

    async def save_state(self, name: str) -> str:
        response = await self._train_call(
            lambda: self._client.save_state(name, ttl_seconds=self._config.ttl_seconds).result(), "save_state"
        )
        return response.path

    async def load_state(self, path: str) -> None:
        """Continue from ``path`` (weights and optimizer state) on a fresh training client."""
        fresh = self._fresh

        def from_state() -> tinker.TrainingClient:
            return self._service.create_training_client_from_state_with_optimizer(path).result()

        try:
            client = await self._train_call(from_state, "create_training_client_from_state_with_optimizer")
        except TinkerError as error:
            if not isinstance(error.__cause__, _NOT_OFFERED):
                raise
            logger.info(
                "%s cannot create a training client from a state; loading it as a fresh client's first call",
                self._server,
            )
            client = await self._load_into_fresh_client(path, reuse=fresh)
        self._client, self._fresh = client, False

    async def _load_into_fresh_client(self, path: str, *, reuse: bool) -> tinker.TrainingClient:
        def load() -> tinker.TrainingClient:
            client = (
                self._client
                if reuse
                else self._service.create_lora_training_client(
                    base_model=self._config.base_model,
                    rank=self._config.lora_rank,
                    seed=self._config.seed,
                    train_unembed=self._config.train_unembed,
                ).result()
            )
            # Deprecated in tinker 0.38 (it logs so at ERROR level), and safe only here: no request came before.
            sdk_log = logging.getLogger("tinker.lib.public_interfaces.training_client")
            sdk_log.addFilter(_quiet_deprecation)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    warnings.simplefilter("ignore", DeprecationWarning)
                    client.load_state_with_optimizer(path).result()
            finally:
                sdk_log.removeFilter(_quiet_deprecation)
            return client

        return await self._train_call(load, "load_state_with_optimizer")

    async def save_weights_for_sampler(self, name: str) -> str:
        response = await self._train_call(
            lambda: self._client.save_weights_for_sampler(name, ttl_seconds=self._config.ttl_seconds).result(),
            "save_weights_for_sampler",
        )
        if not response.path:
            raise TinkerError(f"tinker save_weights_for_sampler at {self._server} returned no path")
        return response.path

    async def scorer(self, path: str) -> TinkerSampler:
        """A sampling client of its own on the weights at ``path``; the training client is not touched."""
        client = await _connect_call(
            lambda: self._service.create_sampling_client(model_path=path).result(),
            self._config.connect_timeout_s,
            "create_sampling_client",
            self._server,
        )
        return self._sampler(client, path)

    async def close(self, outcome: SessionOutcome = "success") -> None:
        """Finish the session on the server and stop the SDK's heartbeats, so the server can free what it holds
        for the session (SkyRL frees an idle session's adapter slots). Bounded and best-effort: a server that
        does not answer within ``CLOSE_TIMEOUT_S`` is left to expire the session itself."""
        await finish_session(self._service, outcome, self._server)

    def _sampler(self, client: tinker.SamplingClient, name: str) -> TinkerSampler:
        return TinkerSampler(
            client, timeout_s=self._config.sample_timeout_s, name=name, server=self._server, liveness=self._liveness
        )

    def __repr__(self) -> str:
        return f"TinkerTrainer(base_model={self._config.base_model!r}, rank={self._config.lora_rank})"


async def finish_session(service: tinker.ServiceClient, outcome: SessionOutcome, server: str) -> None:
    """``service.close(outcome)`` within ``CLOSE_TIMEOUT_S``; a failure is logged, never raised over the run's own."""
    try:
        await in_daemon_thread(lambda: service.close(outcome).result(), CLOSE_TIMEOUT_S, "close")
    except Exception as error:
        logger.info("tinker session at %s not finished cleanly: %s", server, describe_failure(error))


def check_capabilities(capabilities: types.GetServerCapabilitiesResponse, config: TinkerConfig, server: str) -> None:
    """The server must list the base model (when it lists any); ``TinkerError`` names what it serves."""
    names = [m.model_name for m in capabilities.supported_models if m.model_name]
    if names and config.base_model not in names:
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise TinkerError(f"{server} does not serve base model {config.base_model!r} (it serves: {shown})")


async def _connect_call(fn: Callable[[], T], timeout_s: float, what: str, server: str) -> T:
    try:
        return await in_daemon_thread(fn, timeout_s, what)
    except TinkerUnavailable as error:
        raise TinkerUnavailable(f"{error}: is {server} up?") from error
    except Exception as error:
        raise tinker_failure(error, what, server) from error
