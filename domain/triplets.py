"""Parse untrusted triplet payloads into typed turns.

Agent-lightning's ``Triplet`` types ``prompt`` and ``response`` as ``Any``: whatever the endpoint and
the tracer wrote ends up there. This module is the boundary where that data becomes a frozen
``ParsedTurn`` or a typed ``TripletRejection``; nothing past it re-checks types or lengths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, TypeAdapter, ValidationError
from returns.result import Failure, Result, Success

from domain.rejections import RejectionReason, TripletRejection

MAX_TOKEN_ID = 2**31 - 1
"""Token ids above this cannot be a real vocabulary index (and would overflow int32 tensors)."""

TokenId = Annotated[StrictInt, Field(ge=0, le=MAX_TOKEN_ID)]
_token_ids_adapter: TypeAdapter[tuple[int, ...]] = TypeAdapter(tuple[TokenId, ...])
_number_adapter: TypeAdapter[float] = TypeAdapter(StrictInt | StrictFloat)
_version_adapter: TypeAdapter[int] = TypeAdapter(Annotated[StrictInt, Field(ge=0)])


@dataclass(frozen=True, slots=True)
class RawTriplet:
    """A triplet exactly as an adapter received it; nothing about it is trusted yet."""

    prompt: object
    response: object
    reward: object
    metadata: object = None
    """The triplet's metadata mapping (the endpoint's carries ``policy_version``); ``None`` if the source had none."""


class ParsedTurn(BaseModel):
    """One model call of a rollout, checked: tokens are ints, logprobs match them one to one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_tokens: tuple[int, ...]
    """Token ids the model was conditioned on (non-empty)."""
    response_tokens: tuple[int, ...]
    """Token ids the model sampled (non-empty)."""
    response_logprobs: tuple[float, ...]
    """Sampling logprob of each response token; same length as ``response_tokens``."""
    reward: float | None
    """Reward attributed to this call, ``None`` when the agent emitted none for it."""
    policy_version: int | None = None
    """Version of the policy that sampled this call, ``None`` when the source did not say."""


def parse_reward(raw: object) -> Result[float | None, RejectionReason]:
    """Accept ``None`` or a finite real number (bools are not rewards)."""
    if raw is None:
        return Success(None)
    try:
        value = float(_number_adapter.validate_python(raw))
    except ValidationError:
        return Failure(RejectionReason.BAD_REWARD)
    if not math.isfinite(value):
        return Failure(RejectionReason.NON_FINITE_REWARD)
    return Success(value)


def parse_policy_version(metadata: object) -> int | None:
    """The ``policy_version`` a triplet's metadata names: an int >= 0, else ``None`` (unknown).

    A malformed version is treated as absent, not rejected: the turn's tokens and logprobs are
    still trainable, and the version only feeds staleness accounting, where unknown counts as fresh.
    """
    if not isinstance(metadata, Mapping):
        return None
    try:
        return _version_adapter.validate_python(metadata.get("policy_version"))
    except ValidationError:
        return None


def _token_ids(payload: Mapping[object, object]) -> Result[tuple[int, ...], RejectionReason]:
    if "token_ids" not in payload or payload["token_ids"] is None:
        return Failure(RejectionReason.NO_TOKEN_IDS)
    raw = payload["token_ids"]
    if isinstance(raw, str | bytes | Mapping):
        return Failure(RejectionReason.BAD_TOKEN_IDS)
    try:
        tokens = _token_ids_adapter.validate_python(raw)
    except ValidationError:
        return Failure(RejectionReason.BAD_TOKEN_IDS)
    if not tokens:
        return Failure(RejectionReason.EMPTY_TOKEN_IDS)
    return Success(tokens)


def _logprob_value(entry: object) -> float | None:
    """A logprob entry is an OpenAI-style ``{"logprob": x, ...}`` dict or a bare number."""
    raw = entry.get("logprob") if isinstance(entry, Mapping) else entry
    try:
        value = float(_number_adapter.validate_python(raw))
    except ValidationError:
        return None
    # A logprob is log(p) with p in (0, 1]; allow float rounding just above zero.
    return value if math.isfinite(value) and value <= 1e-6 else None


def _logprobs(payload: Mapping[object, object]) -> Result[tuple[float, ...], RejectionReason]:
    raw = payload.get("logprobs")
    if isinstance(raw, Mapping):
        # OpenAI's choice-level shape: {"content": [{"token", "logprob", ...}, ...]}.
        raw = raw.get("content")
    if raw is None:
        return Failure(RejectionReason.LOGPROBS_MISSING)
    if isinstance(raw, str | bytes) or not isinstance(raw, list | tuple):
        return Failure(RejectionReason.BAD_LOGPROBS)
    values = tuple(_logprob_value(entry) for entry in raw)
    if any(value is None for value in values):
        return Failure(RejectionReason.BAD_LOGPROBS)
    return Success(tuple(value for value in values if value is not None))


def parse_triplet(
    index: int, triplet: RawTriplet, vocab_size: int | None = None
) -> Result[ParsedTurn, TripletRejection]:
    """Turn one raw triplet into a ``ParsedTurn``, or say precisely why it cannot be one.

    With ``vocab_size``, ids at or beyond it are rejected: they come from another model (a helper
    or judge on another server) and would index past the policy's embedding.
    """

    def reject(reason: RejectionReason, detail: str) -> Result[ParsedTurn, TripletRejection]:
        return Failure(TripletRejection(index=index, reason=reason, detail=detail))

    prompt, response = triplet.prompt, triplet.response
    if not isinstance(prompt, Mapping) or not isinstance(response, Mapping):
        return reject(
            RejectionReason.MALFORMED_PAYLOAD,
            f"prompt is {type(prompt).__name__}, response is {type(response).__name__}; expected mappings",
        )
    match _token_ids(prompt):
        case Failure(reason):
            return reject(reason, f"prompt: {reason.value}")
        case Success(prompt_tokens):
            pass
    match _token_ids(response):
        case Failure(reason):
            return reject(reason, f"response: {reason.value}")
        case Success(response_tokens):
            pass
    match _logprobs(response):
        case Failure(reason):
            return reject(reason, f"response: {reason.value}")
        case Success(logprobs):
            pass
    if len(logprobs) != len(response_tokens):
        return reject(
            RejectionReason.LOGPROB_COUNT_MISMATCH,
            f"{len(logprobs)} logprobs for {len(response_tokens)} response tokens",
        )
    if vocab_size is not None:
        beyond = max((*prompt_tokens, *response_tokens)) >= vocab_size
        if beyond:
            return reject(RejectionReason.TOKEN_OUT_OF_VOCAB, f"token id beyond the vocabulary of {vocab_size}")
    match parse_reward(triplet.reward):
        case Failure(reason):
            return reject(reason, f"reward of type {type(triplet.reward).__name__}")
        case Success(reward):
            pass
    # Every field was validated above; building without a second validation pass keeps long
    # multi-turn traces cheap to parse.
    return Success(
        ParsedTurn.model_construct(
            prompt_tokens=prompt_tokens,
            response_tokens=response_tokens,
            response_logprobs=logprobs,
            reward=reward,
            policy_version=parse_policy_version(triplet.metadata),
        )
    )
