"""The policy ports (``Trainer``, ``Sampler``) bound to the tinker 0.38 SDK.

Works against the hosted Tinker service or any Tinker-compatible ``base_url``. Every call that
reaches the server is bounded in time: against an unreachable server the SDK blocks for about
five minutes inside ``create_lora_training_client`` (the session handshake waits synchronously),
so connecting runs in a daemon thread and fails with ``TinkerUnavailable`` after
``connect_timeout_s``. The API key comes only from ``TINKER_API_KEY`` and never appears in a
repr, a log line or an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import tinker
from tinker import types

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
    base_url: str | None = None
    """None: ``TINKER_BASE_URL`` or the SDK's default (the hosted service)."""
    seed: int | None = None
    connect_timeout_s: float = 60.0
    """Bound on creating the session and the LoRA training client."""
    request_timeout_s: float = 900.0
    """Bound on one training call (forward-backward, optimizer step, checkpoint)."""
    sample_timeout_s: float = 300.0
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


async def _bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError as error:
        raise TinkerUnavailable(f"tinker {what} did not finish within {timeout_s:g} s") from error
    except tinker.APIConnectionError as error:
        raise TinkerUnavailable(f"tinker {what}: cannot reach the server ({type(error).__name__})") from error


# ---------------------------------------------------------------------------------------------
# The adapters.
# ---------------------------------------------------------------------------------------------


class TinkerSampler:
    """``Sampler`` over one ``tinker.SamplingClient`` (one published set of weights)."""

    def __init__(self, client: tinker.SamplingClient, *, timeout_s: float = 300.0, name: str = "") -> None:
        self._client = client
        self._timeout_s = timeout_s
        self.name = name

    @property
    def client(self) -> tinker.SamplingClient:
        return self._client

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        future = self._client.sample(
            prompt=types.ModelInput.from_ints(list(prompt_tokens)),
            num_samples=num_samples,
            sampling_params=sampling_params_to_tinker(params),
        )
        response = await _bounded(future.result_async(), self._timeout_s, "sample")
        return sequences_from_tinker(response)

    async def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Logprob of each token given the ones before it (``None`` for the first), for KL penalties."""
        prompt = types.ModelInput.from_ints(list(tokens))
        return list(await _bounded(self._client.compute_logprobs(prompt), self._timeout_s, "compute_logprobs"))

    def __repr__(self) -> str:
        return f"TinkerSampler(name={self.name!r})"


class TinkerTrainer:
    """``Trainer`` over a tinker LoRA ``TrainingClient``. Build it with ``await connect(config)``."""

    def __init__(self, config: TinkerConfig, service: tinker.ServiceClient, client: tinker.TrainingClient) -> None:
        self._config = config
        self._service = service
        self._client = client

    @classmethod
    async def connect(cls, config: TinkerConfig) -> TinkerTrainer:
        """Open a session and a LoRA training client; ``TinkerUnavailable`` after the timeout."""
        if not math.isfinite(config.connect_timeout_s) or config.connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be a positive number of seconds")
        base_url = config.base_url or os.environ.get(BASE_URL_ENV) or None
        api_key = os.environ.get(API_KEY_ENV) or None

        def create() -> tuple[tinker.ServiceClient, tinker.TrainingClient]:
            service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
            client = service.create_lora_training_client(
                base_model=config.base_model, rank=config.lora_rank, seed=config.seed
            ).result()
            return service, client

        try:
            service, client = await in_daemon_thread(create, config.connect_timeout_s, "connect")
        except TinkerUnavailable:
            raise
        except tinker.APIConnectionError as error:
            raise TinkerUnavailable(f"cannot reach the tinker server at {base_url or 'the default URL'}") from error
        except tinker.AuthenticationError as error:
            raise TinkerError(f"tinker rejected the credentials from {API_KEY_ENV}") from error
        logger.info("tinker training client ready for %s (rank %d)", config.base_model, config.lora_rank)
        return cls(config, service, client)

    @property
    def config(self) -> TinkerConfig:
        return self._config

    async def _train_call(self, fn: Callable[[], T], what: str) -> T:
        try:
            return await in_daemon_thread(fn, self._config.request_timeout_s, what)
        except tinker.APIConnectionError as error:
            raise TinkerUnavailable(f"tinker {what}: cannot reach the server") from error

    async def forward_backward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput:
        datums = [_without_mask(datum_to_tinker(d, loss)) for d in data_D]
        output = await self._train_call(
            lambda: self._client.forward_backward(datums, loss_fn=loss.value).result(),
            "forward_backward",
        )
        return forward_backward_from_tinker(output)

    async def optim_step(self, params: AdamParams) -> Mapping[str, float]:
        response = await self._train_call(
            lambda: self._client.optim_step(adam_params=adam_to_tinker(params)).result(), "optim_step"
        )
        return {k: float(v) for k, v in (response.metrics or {}).items()}

    async def sampler(self, name: str) -> TinkerSampler:
        """Save the current weights for sampling under ``name`` and return a sampler on them."""
        client = await self._train_call(
            lambda: self._client.save_weights_and_get_sampling_client(name=name or uuid.uuid4().hex).result(),
            "save_weights_and_get_sampling_client",
        )
        return TinkerSampler(client, timeout_s=self._config.sample_timeout_s, name=name)

    async def save_state(self, name: str) -> str:
        response = await self._train_call(
            lambda: self._client.save_state(name, ttl_seconds=self._config.ttl_seconds).result(), "save_state"
        )
        return response.path

    async def load_state(self, path: str) -> None:
        """Load weights and optimizer state, as saved by ``save_state``."""
        await self._train_call(lambda: self._client.load_state_with_optimizer(path).result(), "load_state")

    def __repr__(self) -> str:
        return f"TinkerTrainer(base_model={self._config.base_model!r}, rank={self._config.lora_rank})"
