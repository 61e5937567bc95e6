"""What the policy endpoint records about each completion it serves to a rollout.

The endpoint knows exactly which tokens it rendered and sampled, so it is the source of truth
for training: each completion served under a rollout's URL (``.../rollout/<id>/attempt/<id>/v1``,
which Agent-lightning's ``LLMProxy`` turns into ``x-rollout-id``/``x-attempt-id``/``x-sequence-id``
headers) becomes an ``agl_tinker.completion`` span in the store, with the prompt and sampled token
ids, logprobs, policy version and finish reason. It is numbered (the store's span sequence id) and
written once sampled, before the agent gets the reply, so it is in the store before the rollout can
finish and numbered below every reward the agent emits after reading it. ``adapters.endpoint.triplets`` reads them back.

The served turns of each rollout are also kept here, until the loop forgets the finished rollout, so
the next turn's prompt can extend them token for token (``domain.multiturn``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agentlightning import Span

from domain.multiturn import NormalMessage, ServedTurn

COMPLETION_SPAN = "agl_tinker.completion"
PROMPT_IDS = "agl_tinker.prompt_token_ids"
RESPONSE_IDS = "agl_tinker.response_token_ids"
LOGPROBS = "agl_tinker.logprobs"
POLICY_VERSION = "agl_tinker.policy_version"
FINISH_REASON = "agl_tinker.finish_reason"
MODEL = "agl_tinker.model"
PREFIX = "agl_tinker.prefix"
"""``first_turn``, ``extended`` (token-in-token-out) or ``broken:<PrefixBreak>``."""
CHOICE = "agl_tinker.choice"
"""Which of the request's choices the record holds (one record per choice, all with the request's sequence id)."""
N_CHOICES = "agl_tinker.n_choices"
EXTENDS = "agl_tinker.extends"
"""``[sequence_id, choice]`` of the served choice this prompt extends token for token (absent otherwise)."""
RESPONSE_ID = "agl_tinker.response_id"
"""The id the reply carried (``chatcmpl-policy-...``): a client-side span of the same call carries it too."""


@dataclass(frozen=True, slots=True)
class RolloutCall:
    """Which rollout attempt a request belongs to, and its place in the attempt's span order."""

    rollout_id: str
    attempt_id: str
    sequence_id: int = 0
    """The store's span sequence id, taken once the reply is sampled (0 until then)."""


def rollout_call(litellm_params: object) -> RolloutCall | None:
    """The rollout headers the proxy's middleware injected, or ``None`` for a call outside a rollout."""
    if not isinstance(litellm_params, Mapping):
        return None
    metadata = litellm_params.get("metadata")
    headers = metadata.get("headers") if isinstance(metadata, Mapping) else None
    if not isinstance(headers, Mapping):
        return None
    rollout_id, attempt_id = headers.get("x-rollout-id"), headers.get("x-attempt-id")
    sequence = headers.get("x-sequence-id")
    if not (isinstance(rollout_id, str) and isinstance(attempt_id, str) and isinstance(sequence, str)):
        return None
    if not (rollout_id and attempt_id and sequence.isdigit()):
        return None
    return RolloutCall(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=int(sequence))


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def normal_message(message: Mapping[str, object]) -> NormalMessage:
    """The parts of an OpenAI chat message that rendering depends on."""
    calls: list[tuple[str, str]] = []
    raw_calls = message.get("tool_calls")
    if isinstance(raw_calls, list):
        for call in raw_calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                calls.append((str(function.get("name", "")), str(function.get("arguments", ""))))
    tool_call_id = message.get("tool_call_id")
    return NormalMessage(
        role=str(message.get("role", "")),
        text=_text(message.get("content")),
        tool_calls=tuple(calls),
        tool_call_id=tool_call_id if isinstance(tool_call_id, str) else "",
    )


def tools_key(tools: object) -> str:
    """A canonical text of the request's tool declarations ("" without tools)."""
    if not tools:
        return ""
    return json.dumps(tools, sort_keys=True, default=str)


class ServedTurns:
    """The turns served per rollout attempt, until the rollout is forgotten or one of the most recent
    ``max_rollouts`` rollouts (a bound for rollouts nobody forgets, e.g. an agent's calls after a timeout)."""

    def __init__(self, max_rollouts: int = 4096) -> None:
        self._turns: OrderedDict[str, dict[str, list[ServedTurn]]] = OrderedDict()
        self._max = max_rollouts
        self._lock = threading.Lock()

    def of(self, call: RolloutCall) -> tuple[ServedTurn, ...]:
        with self._lock:
            return tuple(self._turns.get(call.rollout_id, {}).get(call.attempt_id, ()))

    def add(self, call: RolloutCall, turn: ServedTurn) -> None:
        with self._lock:
            self._turns.setdefault(call.rollout_id, {}).setdefault(call.attempt_id, []).append(turn)
            self._turns.move_to_end(call.rollout_id)
            while len(self._turns) > self._max:
                self._turns.popitem(last=False)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        """Drop every attempt's turns of these rollouts (finished: no later turn of theirs will come)."""
        with self._lock:
            for rollout_id in rollout_ids:
                self._turns.pop(rollout_id, None)

    def __len__(self) -> int:
        """How many rollouts have turns held."""
        with self._lock:
            return len(self._turns)


def completion_span(
    call: RolloutCall,
    *,
    model: str,
    prompt: Sequence[int],
    sampled: Sequence[int],
    logprobs: Sequence[float],
    finish_reason: str,
    policy_version: int,
    prefix: str,
    start_time: float,
    choice: int = 0,
    n_choices: int = 1,
    extends: tuple[int, int] | None = None,
    response_id: str | None = None,
) -> Span:
    """The store record of one choice of a served completion."""
    extra: dict[str, list[int] | str] = {EXTENDS: list(extends)} if extends is not None else {}
    if response_id:
        extra[RESPONSE_ID] = response_id
    return Span.from_attributes(
        attributes={
            **extra,
            CHOICE: choice,
            N_CHOICES: n_choices,
            PROMPT_IDS: list(prompt),
            RESPONSE_IDS: list(sampled),
            LOGPROBS: list(logprobs),
            FINISH_REASON: finish_reason,
            POLICY_VERSION: policy_version,
            MODEL: model,
            PREFIX: prefix,
        },
        rollout_id=call.rollout_id,
        attempt_id=call.attempt_id,
        sequence_id=call.sequence_id,
        name=COMPLETION_SPAN,
        start_time=start_time,
        end_time=time.time(),
    )
