"""Token-in-token-out for multi-turn agents: the next prompt extends exactly what the policy saw and sampled.

An agent sends its whole history back on every turn, as text. Re-tokenising an earlier reply
rarely gives back the tokens the policy sampled (byte tokens, other merges), so the next
observation would not extend the previous observation + action, the cookbook could not merge the
turns into one datum, and the prompt trained on would not be the one the model saw. Here the
earlier reply's region of the rendered conversation is replaced by the sampled tokens:

    next prompt = previous prompt + previous sampled tokens (+ end-of-turn) + rendered new messages

Messages are compared in a normal form (role, text, tool calls), so clients that echo the reply
back with extra fields still match. When the history does not extend a served turn, the prompt is
rendered from text as before and the reason is reported (``PrefixBreak``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from returns.result import Failure, Result, Success


class PrefixBreak(StrEnum):
    """Why a turn's prompt could not extend the previous turn's exact tokens."""

    HISTORY_EDITED = "history_edited"
    """An assistant message in the history is not a reply this endpoint served for the rollout."""
    TOOLS_CHANGED = "tools_changed"
    """The tool declarations differ from the served turn's (they are part of the rendered prefix)."""
    RENDER_NOT_PREFIX = "render_not_prefix"
    """The renderer's output for the longer conversation does not start with its output for the shorter."""
    NO_END_OF_REPLY = "no_end_of_reply"
    """The re-rendered reply has no end-of-turn token to splice at."""


@dataclass(frozen=True, slots=True)
class NormalMessage:
    """A chat message as far as rendering cares: role, text, and tool calls (name, arguments)."""

    role: str
    text: str
    tool_calls: tuple[tuple[str, str], ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class ServedTurn:
    """One completion this endpoint served in a rollout: its request, exact prompt and sampled tokens."""

    messages: tuple[NormalMessage, ...]
    tools: str
    """The request's tool declarations in a canonical text form ("" without tools)."""
    prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    reply: NormalMessage


@dataclass(frozen=True, slots=True)
class TurnMatch:
    """A served turn whose request + reply the new request's messages start with."""

    turn: ServedTurn
    n_prefix_messages: int
    """How many of the new messages the turn's request held (the reply is the next one)."""


def match_served_turn(
    messages: Sequence[NormalMessage], tools: str, served: Sequence[ServedTurn]
) -> Result[TurnMatch | None, PrefixBreak]:
    """The latest served turn the request continues; ``None`` for a request with no assistant message."""
    for turn in reversed(served):
        n = len(turn.messages)
        if len(messages) > n and messages[n] == turn.reply and tuple(messages[:n]) == turn.messages:
            if tools != turn.tools:
                return Failure(PrefixBreak.TOOLS_CHANGED)
            return Success(TurnMatch(turn=turn, n_prefix_messages=n))
    if any(m.role == "assistant" for m in messages):
        return Failure(PrefixBreak.HISTORY_EDITED)
    return Success(None)


def splice_prompt(
    turn: ServedTurn,
    rendered_prefix: Sequence[int],
    rendered_full: Sequence[int],
    end_of_turn_ids: frozenset[int],
) -> Result[tuple[int, ...], PrefixBreak]:
    """The new prompt: the turn's exact prompt and sample, then what the renderer adds after the reply.

    ``rendered_prefix`` is the generation prompt rendered from the turn's own messages (text), and
    ``rendered_full`` the one rendered from the new request; the region between the end of the first
    and the first end-of-turn token after it is the re-tokenised reply, which the sampled tokens replace.
    """
    n = len(rendered_prefix)
    if tuple(rendered_full[:n]) != tuple(rendered_prefix):
        return Failure(PrefixBreak.RENDER_NOT_PREFIX)
    rest = rendered_full[n:]
    end = next((i for i, token in enumerate(rest) if token in end_of_turn_ids), None)
    if end is None:
        return Failure(PrefixBreak.NO_END_OF_REPLY)
    ended = bool(turn.sampled) and turn.sampled[-1] in end_of_turn_ids
    closing = () if ended else (rest[end],)
    return Success((*turn.prompt, *turn.sampled, *closing, *rest[end + 1 :]))
